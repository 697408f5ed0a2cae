"""The Telegram channel: python-telegram-bot's Application, run inside the gateway's event loop."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

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
    Sink,
    clip_note,
    deliver_note,
    deliver_parts,
    replacing_preview,
)
from gateway.api import INTAKE_FAILED_REPLY, ConfigurationError
from gateway.channelkit.backoff import delay as backoff_delay
from plugins.telegram.files import Upload, send_upload, too_large
from plugins.telegram.inbound import InboundMessages
from plugins.telegram.limits import TEXT_LIMIT, refused_for_good, retry_seconds, telegram_parts, utf16_len
from plugins.telegram.options import CHANNEL_TYPE, TelegramOptions
from plugins.telegram.profile import TelegramProfileOptions
from plugins.telegram.redaction import TokenFilter
from plugins.telegram.refs import Target, message_ref, replied_message

if TYPE_CHECKING:
    from telegram import Bot, Message, Update
    from telegram.error import TelegramError
    from telegram.ext import Application

    TelegramApp = Application[Any, Any, Any, Any, Any, Any]

log = logging.getLogger("switchyard.telegram")

MAX_INLINE_WAIT_S = 30.0  # longer rate limits go back to the dispatcher as retry_after
ALLOWED_UPDATES = ["message", "edited_message", "callback_query"]  # messages, their edits, taps on buttons
NOTE_GONE = ("message to edit not found", "message can't be edited")  # post the note anew
T = TypeVar("T")


class TelegramChannel:
    """One bot account: receives updates by long polling or webhook and sends replies.

    Polling failures are reported by python-telegram-bot's error callback; a named supervisor
    task then restarts polling with jittered exponential backoff until it works again. Progress
    notes and streamed answers' previews are edited in place (editMessageText), a preview into the final
    answer's first part. A reply's buttons are an inline keyboard under its last text chunk; a tap
    (callback_query) comes in as a payload with `button` (plugins.telegram.inbound).
    """

    name = CHANNEL_TYPE
    edits_progress = True
    shows_buttons = True
    edit_interval_sec = 1.0
    """Telegram's Bot FAQ: "In a single chat, avoid sending more than one message per second", and in a group
    no more than 20 messages a minute (https://core.telegram.org/bots/faq#my-bot-is-hitting-limits-how-do-i-
    avoid-this). An edit is a call on that chat too; a 429 is still waited out (`_waiting`)."""
    group_edit_interval_sec = 3.0

    def edit_interval_for(self, conversation: str) -> float:
        """The FAQ's pace for this chat: a group's (its id is negative) or a private chat's."""
        return self.group_edit_interval_sec if conversation.startswith("-") else self.edit_interval_sec

    def __init__(self, options: TelegramOptions, context: ChannelContext):
        self.profile_id = options.profile_id
        self.options = options
        self.context = context
        self.threads = RunThreads(context.home, options.profile_id)
        self.journal = DeliveryJournal(context.home, options.profile_id)
        self.notes = NoteMessages.kept_for(context.home, options.profile_id)
        self._token = ""
        self._app: TelegramApp | None = None
        self._inbound: InboundMessages | None = None
        self._log_filter: TokenFilter | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._trouble = asyncio.Event()
        self._last_error: BaseException | None = None

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self, sink: Sink) -> None:
        self._token = self.options.token()
        secret = self.options.webhook_secret()
        for value in (self._token, secret):
            if value:
                self.context.events.add_secret(value)
        _import_library()
        self._log_filter = TokenFilter(self._token)
        self._log_filter.install()  # before building: the Bot logs its URL, token included, at DEBUG
        app = _build_application(self.options, self._token)
        from plugins.telegram.groups import ChatAdministrators

        self._inbound = InboundMessages(self.context, self.threads, sink, ChatAdministrators(app.bot, self.context))
        from telegram import Update
        from telegram.ext import TypeHandler

        app.add_handler(TypeHandler(Update, self._on_update))
        try:
            await self._login(app)
            await app.start()
            await self._start_updates(app, secret)
        except BaseException:
            await self._shutdown(app)
            self._log_filter.remove()
            raise
        self._app = app
        if self.options.mode == "webhook" and secret is None:
            log.warning("telegram %s: webhook without webhook_secret_env accepts updates from anyone who "
                        "knows its URL", self.profile_id)
        if self.options.mode == "polling":
            self._supervisor = asyncio.create_task(self._supervise(), name=f"telegram:{self.profile_id}:reconnect")
        log.info("telegram %s: connected as @%s (%s)", self.profile_id, app.bot.username, self.options.mode)

    async def _login(self, app: TelegramApp) -> None:
        """Checks the token with getMe; errors name the variable and the server, never the token."""
        from telegram.error import InvalidToken, TelegramError

        where = f"the Bot API at {self.options.base_url}"
        try:
            await app.initialize()
        except InvalidToken:  # 401 (or 404: a malformed token): retrying the same token cannot help
            raise ConfigurationError(f"telegram profile {self.profile_id!r}: {where} rejected the bot token "
                                     f"in {self.options.token_env} (401 Unauthorized); set a valid token and "
                                     "restart") from None
        except TelegramError as exc:
            raise RuntimeError(f"telegram profile {self.profile_id!r}: cannot log in to {where}: "
                               f"{self._scrub(exc)}") from None

    async def _start_updates(self, app: TelegramApp, secret: str | None) -> None:
        """Starts long polling, or the webhook server after registering its URL with setWebhook."""
        from telegram.error import TelegramError

        updater = app.updater
        assert updater is not None
        try:
            if self.options.mode == "webhook":
                await updater.start_webhook(
                    listen=self.options.webhook_listen, port=self.options.webhook_port,
                    url_path=self.options.webhook_path, webhook_url=self.options.webhook_url,
                    secret_token=secret, allowed_updates=ALLOWED_UPDATES)
            else:
                await updater.start_polling(
                    timeout=timedelta(seconds=self.options.poll_timeout_sec),
                    allowed_updates=ALLOWED_UPDATES, error_callback=self._on_poll_error)
        except (TelegramError, OSError) as exc:
            raise RuntimeError(f"telegram profile {self.profile_id!r}: cannot start receiving updates "
                               f"({self.options.mode}): {self._scrub(exc)}") from None

    async def stop(self) -> None:
        if self._supervisor is not None:
            self._supervisor.cancel()
            await asyncio.gather(self._supervisor, return_exceptions=True)
            self._supervisor = None
        if self._app is not None:
            await self._shutdown(self._app)
            self._app = None
        if self._log_filter is not None:
            self._log_filter.remove()
            self._log_filter = None

    async def _shutdown(self, app: TelegramApp) -> None:
        """Stops updates, update processing and the HTTP clients, logging (not raising) failures."""
        try:
            if app.updater is not None and app.updater.running:
                await app.updater.stop()
            if app.running:
                await app.stop()
            await app.shutdown()
            await app.bot.shutdown()  # a failed login leaves the HTTP clients open
        except Exception as exc:
            log.warning("telegram %s: unclean shutdown: %s", self.profile_id, self._scrub(exc))

    # --- reconnecting -----------------------------------------------------------------------

    def _on_poll_error(self, exc: TelegramError) -> None:
        """python-telegram-bot's polling error callback (synchronous, must not raise)."""
        self._last_error = exc
        self._trouble.set()

    async def _supervise(self) -> None:
        """Restarts polling after each failure, with jittered exponential backoff."""
        failures, recovered_at = 0, 0.0
        while True:
            await self._trouble.wait()
            if time.monotonic() - recovered_at > self.options.reconnect_max_sec:
                failures = 0
            assert self._app is not None and self._app.updater is not None
            if self._app.updater.running:
                try:
                    await self._app.updater.stop()
                except Exception as exc:
                    log.debug("telegram %s: stopping the failed poller: %s", self.profile_id, self._scrub(exc))
            self._trouble.clear()
            while True:
                failures += 1
                await self._back_off(failures)
                try:
                    await self._start_updates(self._app, None)
                    break
                except Exception as exc:
                    self._last_error = exc
            recovered_at = time.monotonic()
            log.info("telegram %s: receiving updates again", self.profile_id)
            self.context.events.emit("channel.reconnected", channel=CHANNEL_TYPE, profile=self.profile_id,
                                     attempt=failures)

    async def _back_off(self, failures: int) -> None:
        """Waits before reconnect attempt number `failures` (doubling, capped, jittered)."""
        delay = backoff_delay(failures, self.options.reconnect_initial_sec, self.options.reconnect_max_sec,
                              jitter=(0.5, 1.0))
        reason = self._scrub(self._last_error) if self._last_error else "unknown error"
        log.warning("telegram %s: receiving updates failed (%s); reconnecting in %.1fs",
                    self.profile_id, reason, delay)
        self.context.events.emit("channel.reconnecting", channel=CHANNEL_TYPE, profile=self.profile_id,
                                 attempt=failures, delay_ms=int(delay * 1000), reason=reason)
        await asyncio.sleep(delay)

    # --- inbound ----------------------------------------------------------------------------

    async def _on_update(self, update: Update, _context: object) -> None:
        """Handles one update from the Application (updates are processed one at a time)."""
        if update.callback_query is not None and self._inbound is not None:
            await self._inbound.tap(update.callback_query)
            return
        message = update.message or update.edited_message
        if message is None or self._inbound is None:
            return
        try:
            await self._inbound.handle(update.get_bot(), message, edited=update.message is None)
        except Exception as exc:  # Telegram will not send the update again: tell the sender
            log.exception("telegram %s: could not enqueue message %s", self.profile_id, message.message_id)
            self.context.events.emit("channel.error", channel=CHANNEL_TYPE, profile=self.profile_id,
                                     reason=self._scrub(exc))
            try:
                await message.reply_text(INTAKE_FAILED_REPLY)
            except Exception as reply_exc:
                log.warning("telegram %s: could not tell the sender either: %s", self.profile_id,
                            self._scrub(reply_exc))

    # --- outbound ---------------------------------------------------------------------------

    async def send(self, outgoing: OutgoingPayload) -> DeliveryRecord:
        bot = self._bot()
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
            data = await self.context.read_attachment(outgoing, part.file) if part.file is not None else None
            if part.file is not None and data is not None and (note := too_large(part.file.name, data)):
                self.context.events.emit("outgoing.file_refused", reason=note, path=str(part.file), stage="delivery",
                                         channel=CHANNEL_TYPE, conversation=outgoing.conversationId)
                part, data = Part(part.index, text=f"{part.text}\n{note}" if part.text else note), None
            return await self._send_part(bot, target, part, data, quoted, outgoing.workflowRunId)

        async def edit(ref: str, text: str) -> bool:
            return await self._edit(bot, ref, text)

        return await deliver_parts(outgoing, parts, replacing_preview(outgoing, self.notes, send_part, edit),
                                   self.journal)

    async def _send_note(self, bot: Bot, target: Target, outgoing: OutgoingPayload) -> DeliveryRecord:
        """Posts a progress note, or edits the message already showing that note."""
        quote = replied_message(outgoing.messageId, target.chat)

        async def post(text: str) -> str:
            return await self._send_part(bot, target, Part(0, text=text), None, quote, outgoing.workflowRunId)

        async def edit(ref: str, text: str) -> bool:
            return await self._edit(bot, ref, text)

        text = clip_note(outgoing.message, TEXT_LIMIT, utf16_len)
        return await deliver_note(outgoing, self.notes, text, post, edit)

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
            self.threads.remember(ref, run_id)
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

    async def typing(self, conversation: str) -> None:
        """Shows "typing…" in the conversation (Telegram shows it for ~5 s); failures are logged."""
        from telegram.constants import ChatAction

        try:
            target = Target.parse(conversation)
            await self._bot().send_chat_action(target.chat, ChatAction.TYPING, message_thread_id=target.topic)
        except Exception as exc:
            log.warning("telegram %s: typing indicator for %s failed: %s", self.profile_id, conversation,
                        self._scrub(exc))

    def _bot(self) -> Bot:
        if self._app is None:
            raise DeliveryError(f"telegram profile {self.profile_id!r} is not connected")
        bot: Bot = self._app.bot
        return bot

    def _scrub(self, exc: BaseException | str) -> str:
        text = str(exc) or type(exc).__name__
        return text.replace(self._token, "***") if self._token else text


def _import_library() -> None:
    """Imports python-telegram-bot (only when a telegram profile starts)."""
    problem = TelegramProfileOptions.unavailable()
    if problem is not None:
        raise ConfigurationError(problem)


def _build_application(options: TelegramOptions, token: str) -> TelegramApp:
    """The Application for this bot, pointed at the configured Bot API (no job queue)."""
    from telegram.ext import ApplicationBuilder

    return (ApplicationBuilder().token(token).base_url(options.base_url)
            .base_file_url(options.base_file_url).job_queue(None).build())
