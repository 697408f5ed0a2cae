"""Turns a person's Telegram message, or tap on a reply's button, into an incoming payload: access,
attachments, run thread, and the sender's platform groups (plugins/telegram/groups.py)."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from gateway import (
    INTAKE_FAILED_REPLY,
    AccessDecision,
    ChannelContext,
    IncomingPayload,
    OutgoingPayload,
    RunThreads,
    Sink,
    audio_note,
    now_ms,
    with_audio,
)
from gateway.channelkit.groups import with_groups
from plugins.telegram.options import CHANNEL_TYPE
from plugins.telegram.refs import conversation_id, message_ref

if TYPE_CHECKING:
    from telegram import Bot, CallbackQuery, Message

    from plugins.telegram.groups import ChatAdministrators

log = logging.getLogger("switchyard.telegram")

MEDIA_KINDS = ("document", "audio", "video", "voice", "video_note", "animation")
AUDIO_KINDS = ("voice", "audio")  # transcribed by the orchestrator (gateway/channelkit/audio.py)
ANSWERED = "answered: {label}"  # said under the tapped message (its keyboard removed) and on the tapper's screen
NOT_YOURS = "You may not answer here."


def _edit_ref(message: Message) -> str:
    """The messageId of one edit of a message: the message's own, with the edit's time."""
    edited_at = int(message.edit_date.timestamp()) if message.edit_date is not None else 0
    return f"{message_ref(message.chat_id, message.message_id)}:e{edited_at}"


class InboundMessages:
    """Admits or refuses each message, downloads its files and hands the payload to the sink."""

    def __init__(self, context: ChannelContext, threads: RunThreads, sink: Sink,
                 admins: ChatAdministrators | None = None):
        self.context = context
        self.profile_id = context.profile.id
        self.access = context.access
        self.threads = threads
        self.sink = sink
        self.admins = admins

    async def _groups(self, chat_id: int, chat_type: str | None, user_id: int) -> list[str]:
        """The sender's platform groups in this chat (none without a lookup)."""
        return [] if self.admins is None else await self.admins.of(chat_id, chat_type, user_id)

    async def handle(self, bot: Bot, message: Message, *, edited: bool = False) -> Path | None:
        """Enqueues one message (`edited`: an edit of one, whose messageId names the edit's time, so a
        redelivery is the same edit); returns its queue file, or None when it is ignored or refused."""
        user = message.from_user
        if user is None or user.is_bot:
            return None  # other bots, the bot itself, anonymous admins
        text = _without_bot_mention(message.text or message.caption or "", bot.username)
        attachments = [] if edited else _attachments(message)  # an edit's files came with the original
        if not text.strip() and not attachments:
            return None  # stickers, service messages, polls, …
        topic = message.message_thread_id if message.is_topic_message else None
        conversation = conversation_id(message.chat_id, topic)
        sender_id, sender = str(user.id), user.full_name or user.username or str(user.id)
        decision = self.access.check(sender_id, sender)
        if not decision.allowed:
            self._refuse(message, conversation, sender_id, sender, decision)
            return None
        groups = await self._groups(message.chat_id, message.chat.type, user.id)
        notes = [await self._download(bot, conversation, *attachment) for attachment in attachments]
        reply = message.reply_to_message
        payload = IncomingPayload(
            channel=CHANNEL_TYPE, channelProfileId=self.profile_id, sender=sender, senderId=sender_id,
            message="\n".join(line for line in (text, *(note for note, _ in notes)) if line),
            timestamp=int(message.date.timestamp() * 1000),
            messageId=_edit_ref(message) if edited else message_ref(message.chat_id, message.message_id),
            editOf=message_ref(message.chat_id, message.message_id) if edited else None, conversationId=conversation,
            files=[str(path) for _, path in notes if path is not None],
            workflowRunId=self.threads.run_for(message_ref(message.chat_id, reply.message_id))
            if reply is not None else None,
        )
        payload = with_audio(payload, _audio(message, attachments, [path for _, path in notes]))
        return await self.sink(with_groups(payload, groups))

    async def tap(self, query: CallbackQuery) -> Path | None:
        """Enqueues a tap on a reply's button as a payload with `button` (its callback_data) and the
        button's label as the message, then answers the query (the client stops spinning) and edits
        the message: its keyboard removed, "answered: <label>" added. Refused like a message when the
        sender is not allowed. The messageId is the query's own id: a redelivery is the same message."""
        message, user = query.message, query.from_user
        if message is None or user.is_bot or not query.data:
            await _quietly(query.answer())
            return None
        topic = getattr(message, "message_thread_id", None) if getattr(message, "is_topic_message", False) else None
        conversation = conversation_id(message.chat.id, topic)
        sender_id, sender = str(user.id), user.full_name or user.username or str(user.id)
        label = _label(message, query.data)
        decision = self.access.check(sender_id, sender)
        if not decision.allowed:
            self._refuse_tap(conversation, sender_id, sender, label, f"{message.chat.id}:cb{query.id}", decision)
            await _quietly(query.answer(NOT_YOURS))
            return None
        payload = IncomingPayload.model_validate({
            "channel": CHANNEL_TYPE, "channelProfileId": self.profile_id, "sender": sender, "senderId": sender_id,
            "message": label, "timestamp": now_ms(), "messageId": f"{message.chat.id}:cb{query.id}",
            "conversationId": conversation, "button": query.data})
        payload = with_groups(payload, await self._groups(message.chat.id, getattr(message.chat, "type", None),
                                                          user.id))
        try:
            path = await self.sink(payload)
        except Exception:
            await _quietly(query.answer(INTAKE_FAILED_REPLY, show_alert=True))
            raise
        answered = ANSWERED.format(label=label)
        await _quietly(query.answer(answered))
        text = getattr(message, "text", None)
        if text is not None and len(text) + len(answered) < 4000:
            entities = getattr(message, "entities", None)
            await _quietly(query.edit_message_text(f"{text}\n\n{answered}", entities=entities))
        else:
            await _quietly(query.edit_message_reply_markup(None))
        return path

    def _refuse_tap(self, conversation: str, sender_id: str, sender: str, label: str, message_id: str,
                    decision: AccessDecision) -> None:
        """Records a refused tap and, when the policy says so (pairing), queues its reply."""
        self.context.events.emit("message.rejected", channel=CHANNEL_TYPE, profile=self.profile_id,
                                 conversation=conversation, senderId=sender_id, reason=decision.reason)
        if decision.reply:
            self.context.outbox.write(OutgoingPayload(
                channel=CHANNEL_TYPE, channelProfileId=self.profile_id, sender=sender, senderId=sender_id,
                message=decision.reply, originalMessage=label, timestamp=now_ms(), messageId=message_id,
                agent="switchyard", conversationId=conversation))

    async def _download(self, bot: Bot, conversation: str, kind: str, file_id: str,
                        name: str | None) -> tuple[str, Path | None]:
        """Saves one attachment; returns its `[file: …]` tag, or a note when it cannot be fetched."""
        from telegram.error import TelegramError

        try:
            remote = await bot.get_file(file_id)
            data = await remote.download_as_bytearray()
        except (TelegramError, OSError, RuntimeError) as exc:
            log.warning("telegram %s: cannot download a %s: %s", self.profile_id, kind, exc)
            return f"[file not downloaded: {name or kind}: {exc}]", None
        filename = name or f"{kind}{PurePosixPath(remote.file_path or '').suffix}"
        path = await self.context.save_attachment(filename, bytes(data), conversation=conversation)
        return f"[file: {path}]", path

    def _refuse(self, message: Message, conversation: str, sender_id: str, sender: str,
                decision: AccessDecision) -> None:
        """Records the refusal and, when the policy says so (pairing), queues its reply."""
        self.context.events.emit("message.rejected", channel=CHANNEL_TYPE, profile=self.profile_id,
                                 conversation=conversation, senderId=sender_id, reason=decision.reason)
        if decision.reply:
            self.context.outbox.write(OutgoingPayload(
                channel=CHANNEL_TYPE, channelProfileId=self.profile_id, sender=sender, senderId=sender_id,
                message=decision.reply, originalMessage=message.text or message.caption or "",
                timestamp=now_ms(), messageId=message_ref(message.chat_id, message.message_id),
                agent="switchyard", conversationId=conversation,
            ))


def _label(message: object, data: str) -> str:
    """The text of the button with this callback_data in the message's keyboard (the data itself when
    the message is too old for Telegram to include it)."""
    markup = getattr(message, "reply_markup", None)
    for row in getattr(markup, "inline_keyboard", None) or ():
        for button in row:
            if button.callback_data == data:
                return str(button.text)
    return data


async def _quietly(call: Awaitable[object]) -> None:
    """Makes a Bot API call whose failure only costs a cosmetic detail (logged, never raised)."""
    from telegram.error import TelegramError

    try:
        await call
    except TelegramError as exc:
        log.info("telegram: answering a button tap: %s", exc)


def _without_bot_mention(text: str, username: str | None) -> str:
    """`/status@this_bot …` (how group members address a bot) becomes `/status …`."""
    if not username:
        return text
    return re.sub(rf"^(/\w+)@{re.escape(username)}\b", r"\1", text, flags=re.IGNORECASE)


def _attachments(message: Message) -> list[tuple[str, str, str | None]]:
    """(kind, file_id, file name) of each file in the message; photos at their largest size."""
    found: list[tuple[str, str, str | None]] = []
    if message.photo:
        largest = max(message.photo, key=lambda size: size.width * size.height)
        found.append(("photo", largest.file_id, None))
    for kind in MEDIA_KINDS:
        media = getattr(message, kind)
        if media is not None and all(media.file_id != seen for _, seen, _ in found):
            found.append((kind, media.file_id, getattr(media, "file_name", None)))
    return found


def _audio(message: Message, attachments: list[tuple[str, str, str | None]],
           paths: list[Path | None]) -> list[dict[str, Any]]:
    """The payload's `audio` entries for the voice notes and audio files saved, with Telegram's own
    duration and MIME type."""
    found = []
    for (kind, _, _), path in zip(attachments, paths, strict=True):
        media = getattr(message, kind) if kind in AUDIO_KINDS else None
        if media is not None and path is not None:
            found.append(audio_note(path, media.duration, media.mime_type))
    return found
