"""How the Telegram bot sends: a reply's parts as Bot API calls (text with its buttons, files natively by type),
the first quoting the user's message, progress notes and previews edited in place, and short rate limits
waited out."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, TypeVar

from gateway import (
    ChannelContext,
    DeliveryError,
    DeliveryJournal,
    DeliveryRecord,
    NoteMessages,
    OutgoingPayload,
    Part,
    PermanentError,
    RunThreads,
    clip_note,
    deliver_note,
    deliver_parts,
    replacing_preview,
)
from plugins.telegram.files import Upload, send_upload, too_large
from plugins.telegram.limits import TEXT_LIMIT, refused_for_good, retry_seconds, telegram_parts, utf16_len
from plugins.telegram.options import CHANNEL_TYPE
from plugins.telegram.refs import Target, message_ref, replied_message

if TYPE_CHECKING:
    from telegram import Bot, Message
    from telegram.error import TelegramError

MAX_INLINE_WAIT_S = 30.0  # longer rate limits go back to the dispatcher as retry_after
NOTE_GONE = ("message to edit not found", "message can't be edited")  # post the note anew
T = TypeVar("T")


class Poster:
    """Sends one profile's replies through the bot it is given (the channel's, once connected); errors it raises
    are scrubbed of the bot token by `scrub`."""

    def __init__(self, context: ChannelContext, threads: RunThreads, journal: DeliveryJournal, notes: NoteMessages,
                 scrub: Callable[[BaseException | str], str]):
        self._context = context
        self._threads = threads
        self._journal = journal
        self._notes = notes
        self._scrub = scrub

    async def send(self, bot: Bot, outgoing: OutgoingPayload) -> DeliveryRecord:
        """Sends a reply's parts (a progress note edits the message already showing it)."""
        target = Target.parse(outgoing.conversationId or outgoing.senderId or "")
        if target.chat == "":
            raise DeliveryError("telegram: the payload names no conversationId or senderId to send to")
        if outgoing.progress_key and not outgoing.files:
            return await self._send_note(bot, target, outgoing)
        parts = telegram_parts(outgoing)
        reply_to = replied_message(outgoing.messageId, target.chat)
        first = parts[0].index if parts else -1

        async def send_part(part: Part) -> str:
            quoted = reply_to if part.index == first else None
            data = await self._context.read_attachment(outgoing, part.file) if part.file is not None else None
            if part.file is not None and data is not None and (note := too_large(part.file.name, data)):
                self._context.events.emit("outgoing.file_refused", reason=note, path=str(part.file), stage="delivery",
                                         channel=CHANNEL_TYPE, conversation=outgoing.conversationId)
                part, data = Part(part.index, text=f"{part.text}\n{note}" if part.text else note), None
            return await self._send_part(bot, target, part, data, quoted, outgoing.workflowRunId)

        async def edit(ref: str, text: str) -> bool:
            return await self._edit(bot, ref, text)

        return await deliver_parts(outgoing, parts, replacing_preview(outgoing, self._notes, send_part, edit),
                                   self._journal)

    async def _send_note(self, bot: Bot, target: Target, outgoing: OutgoingPayload) -> DeliveryRecord:
        """Posts a progress note, or edits the message already showing that note."""
        quote = replied_message(outgoing.messageId, target.chat)

        async def post(text: str) -> str:
            return await self._send_part(bot, target, Part(0, text=text), None, quote, outgoing.workflowRunId)

        async def edit(ref: str, text: str) -> bool:
            return await self._edit(bot, ref, text)

        text = clip_note(outgoing.message, TEXT_LIMIT, utf16_len)
        return await deliver_note(outgoing, self._notes, text, post, edit)

    async def _edit(self, bot: Bot, ref: str, text: str) -> bool:
        """Replaces a sent message's text; False when that message is gone ("not modified" is success)."""
        from telegram.error import BadRequest, ChatMigrated, TelegramError

        chat, _, number = ref.rpartition(":")
        try:
            await self._waiting(partial(bot.edit_message_text, text, chat_id=chat, message_id=int(number)))
        except BadRequest as exc:
            wording = str(exc).lower()
            if "message is not modified" in wording:
                return True
            if any(gone in wording for gone in NOTE_GONE):
                return False
            raise self._failure(exc) from exc
        except ChatMigrated:
            return False
        except TelegramError as exc:
            raise self._failure(exc) from exc
        return True

    async def _send_part(self, bot: Bot, target: Target, part: Part, data: bytes | None, reply_to: int | None,
                         run_id: str | None) -> str:
        """Sends one part, waiting out short rate limits; returns its `<chat>:<message id>`."""
        from telegram.error import ChatMigrated, TelegramError

        chat = target.chat
        while True:
            try:
                sent = await self._waiting(partial(self._post, bot, chat, target.topic, part, data, reply_to))
                break
            except ChatMigrated as exc:
                if chat != target.chat:
                    raise DeliveryError(f"telegram: chat {target.chat} keeps moving") from exc
                chat = exc.new_chat_id
            except TelegramError as exc:
                raise self._failure(exc) from exc
        ref = message_ref(chat, sent.message_id)
        if run_id:
            self._threads.remember(ref, run_id)
        return ref

    async def _waiting(self, call: Callable[[], Awaitable[T]]) -> T:
        """Makes one Bot API call, waiting out rate limits up to MAX_INLINE_WAIT_S in all; a longer
        one raises DeliveryError with its retry_after, other TelegramErrors pass through."""
        from telegram.error import RetryAfter

        waited = 0.0
        while True:
            try:
                return await call()
            except RetryAfter as exc:
                delay = retry_seconds(exc)
                if waited + delay > MAX_INLINE_WAIT_S:
                    raise DeliveryError(f"telegram rate limit: retry in {delay:g}s", retry_after=delay) from exc
                waited += delay
                await asyncio.sleep(delay)

    def _failure(self, exc: TelegramError) -> Exception:
        """The error a refused call raises: PermanentError when retrying cannot help, else DeliveryError."""
        if refused_for_good(exc):
            return PermanentError(f"telegram refused the message for good: {self._scrub(exc)}")
        return DeliveryError(f"telegram did not take the message: {self._scrub(exc)}")

    async def _post(self, bot: Bot, chat: int | str, topic: int | None, part: Part, data: bytes | None,
                    reply_to: int | None) -> Message:
        """One Bot API call: a file (its bytes in `data`) natively by its type with its caption
        (plugins.telegram.files), sendMessage (plain text, with the part's buttons as an inline keyboard, one
        per row) otherwise."""
        from telegram import InlineKeyboardButton, InlineKeyboardMarkup, ReplyParameters

        quote = ReplyParameters(message_id=reply_to, allow_sending_without_reply=True) if reply_to else None
        if part.file is not None and data is not None:
            return await send_upload(bot, chat, Upload(part.file.name, data, part.text), topic=topic, quote=quote)
        keyboard = InlineKeyboardMarkup([[InlineKeyboardButton(b.label, callback_data=b.id)] for b in part.buttons])
        return await bot.send_message(chat, part.text or "", message_thread_id=topic, reply_parameters=quote,
                                      reply_markup=keyboard if part.buttons else None)
