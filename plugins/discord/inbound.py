"""Turns Discord messages, and taps on the buttons of replies, into incoming payloads: who may talk,
attachments, threads → workflow runs, and the sender's roles as platform groups (plugins/discord/groups.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import aiohttp
import discord

from gateway import (
    INTAKE_FAILED_REPLY,
    AccessDecision,
    ChannelContext,
    IncomingPayload,
    OutgoingPayload,
    RunThreads,
    Sink,
    audio_note,
    is_audio,
    now_ms,
    with_audio,
)
from gateway.channelkit.groups import with_groups
from plugins.discord import CHANNEL_TYPE
from plugins.discord.groups import member_groups

log = logging.getLogger("switchyard.discord")

SEEN_LIMIT = 10_000
CONVERSATIONAL = frozenset({discord.MessageType.default, discord.MessageType.reply})
ANSWERED = "answered: {label}"
BUTTON = 2  # the component type of a button (select menus and others are not taps on a reply's buttons)
NOT_YOURS = "You may not answer here."


class Intake:
    """Admits or refuses the Discord messages of one profile and sinks admitted ones, in order per channel."""

    def __init__(self, context: ChannelContext, threads: RunThreads, *, require_mention: bool):
        self._context = context
        self._profile_id = context.profile.id
        self._access = context.access
        self._threads = threads
        self._require_mention = require_mention
        self._seen: OrderedDict[int, int] = OrderedDict()
        self._locks: dict[int, tuple[asyncio.Lock, int]] = {}

    def channel_of(self, message_id: int) -> int | None:
        """The channel a user's message came from, if it arrived since this process started."""
        return self._seen.get(message_id)

    async def receive(self, message: discord.Message, me: discord.ClientUser, sink: Sink, *,
                      edited: bool = False) -> None:
        """Handles one MESSAGE_CREATE (or, `edited`, a MESSAGE_UPDATE that edits one: a payload with `editOf`
        and the messageId `<id>:e<edited time>`): ignores bots and system messages, checks access, sinks it."""
        if message.author.bot or message.author.id == me.id or message.type not in CONVERSATIONAL:
            return
        self._remember(message)
        async with self._in_order(message.channel.id):
            await self._admit(message, me, sink, edited)

    async def tap(self, interaction: discord.Interaction, sink: Sink) -> None:
        """Handles a tap on a reply's button (a component interaction, dispatched by its custom_id so a tap
        on a message sent before a restart still arrives): the access check of a message, then a payload
        with `button` and the label (messageId `tap:<interaction id>`, the same when Discord sends the
        interaction again), answered by editing the message to say "answered: <label>" without buttons."""
        data: dict[str, Any] = dict(interaction.data or {})
        custom_id = str(data.get("custom_id") or "")
        if data.get("component_type") != BUTTON or interaction.user.bot or not custom_id \
                or interaction.channel_id is None:
            return
        async with self._in_order(interaction.channel_id):
            await self._admit_tap(interaction, custom_id, sink)

    async def _admit_tap(self, interaction: discord.Interaction, custom_id: str, sink: Sink) -> None:
        sender_id, sender = str(interaction.user.id), interaction.user.display_name
        decision = await asyncio.to_thread(self._access.check, sender_id, sender)
        label = _label(interaction.message, custom_id)
        if not decision.allowed:
            await self._refuse_tap(interaction, label, decision)
            return
        payload = IncomingPayload.model_validate({
            "channel": CHANNEL_TYPE, "channelProfileId": self._profile_id, "sender": sender, "senderId": sender_id,
            "message": label, "timestamp": int(interaction.created_at.timestamp() * 1000),
            "messageId": f"tap:{interaction.id}", "conversationId": str(interaction.channel_id),
            "button": custom_id})
        payload = with_groups(payload, member_groups(self._context.profile, interaction.user))
        try:
            await sink(payload)
        except Exception:
            await _respond(interaction.response.send_message(INTAKE_FAILED_REPLY, ephemeral=True))
            raise
        content = interaction.message.content if interaction.message is not None else ""
        answered = ANSWERED.format(label=label)
        await _respond(interaction.response.edit_message(content=f"{content}\n\n{answered}".strip()[:2000],
                                                         view=None))

    async def _refuse_tap(self, interaction: discord.Interaction, label: str, decision: AccessDecision) -> None:
        """Records a refused tap, tells the tapper (only them), and queues a pairing reply when there is one."""
        conversation = str(interaction.channel_id)
        self._context.events.emit("message.rejected", channel=CHANNEL_TYPE, profile=self._profile_id,
                                  conversation=conversation, senderId=str(interaction.user.id),
                                  reason=decision.reason)
        await _respond(interaction.response.send_message(NOT_YOURS, ephemeral=True))
        if decision.reply:
            answer = OutgoingPayload(
                channel=CHANNEL_TYPE, channelProfileId=self._profile_id, sender=interaction.user.display_name,
                senderId=str(interaction.user.id), message=decision.reply, originalMessage=label,
                timestamp=now_ms(), messageId=f"tap:{interaction.id}", agent="access", conversationId=conversation)
            await asyncio.to_thread(self._context.outbox.write, answer)

    @contextlib.asynccontextmanager
    async def _in_order(self, channel_id: int) -> AsyncIterator[None]:
        """Holds the channel's lock: taken before the first await, as discord.py starts one task per event in
        arrival order, so a channel's messages and taps reach the sink in order even when one waits."""
        lock, users = self._locks.get(channel_id, (asyncio.Lock(), 0))
        self._locks[channel_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[channel_id]
            if users <= 1:
                del self._locks[channel_id]
            else:
                self._locks[channel_id] = (lock, users - 1)

    async def _admit(self, message: discord.Message, me: discord.ClientUser, sink: Sink, edited: bool) -> None:
        run_id = self._threads.run_for(message.reference.message_id if message.reference else None,
                                       message.channel.id)
        if not self._addressed(message, me, run_id):
            return
        sender_id, sender = str(message.author.id), message.author.display_name
        decision = await asyncio.to_thread(self._access.check, sender_id, sender)
        if not decision.allowed:
            await self._refuse(message, decision)
            return
        payload = await self._payload(message, me, run_id, download=not edited)  # an edit's files came before
        if payload is None:
            return
        if edited and message.edited_at is not None:
            payload = payload.model_copy(update={
                "editOf": payload.messageId, "messageId": f"{message.id}:e{int(message.edited_at.timestamp() * 1000)}"})
        try:
            await sink(payload)
        except Exception as exc:  # Discord will not send the event again: tell the sender
            log.exception("discord profile %s: message %s could not be queued", self._profile_id, message.id)
            self._context.events.emit("channel.error", channel=CHANNEL_TYPE, profile=self._profile_id,
                                      reason=f"inbound message {message.id}: {exc}")
            try:
                await message.reply(INTAKE_FAILED_REPLY, mention_author=False)
            except Exception as reply_exc:
                log.warning("discord profile %s: could not tell the sender either: %s", self._profile_id,
                            reply_exc)

    def _addressed(self, message: discord.Message, me: discord.ClientUser, run_id: str | None) -> bool:
        """False for guild-channel chatter not meant for the bot, when `require_mention` is on."""
        if not self._require_mention or run_id is not None or me.id in message.raw_mentions:
            return True
        if isinstance(message.channel, discord.DMChannel | discord.GroupChannel):
            return True
        replied = message.reference.resolved if message.reference else None
        return isinstance(replied, discord.Message) and replied.author.id == me.id

    async def _refuse(self, message: discord.Message, decision: AccessDecision) -> None:
        conversation = str(message.channel.id)
        self._context.events.emit("message.rejected", channel=CHANNEL_TYPE, profile=self._profile_id,
                                  conversation=conversation, senderId=str(message.author.id),
                                  reason=decision.reason)
        if decision.reply:
            answer = OutgoingPayload(
                channel=CHANNEL_TYPE, channelProfileId=self._profile_id, sender=message.author.display_name,
                senderId=str(message.author.id), message=decision.reply, originalMessage=message.content,
                timestamp=now_ms(), messageId=str(message.id), agent="access", conversationId=conversation)
            await asyncio.to_thread(self._context.outbox.write, answer)

    async def _payload(self, message: discord.Message, me: discord.ClientUser,
                       run_id: str | None, *, download: bool = True) -> IncomingPayload | None:
        files, notes, audio = await self._download(message) if download else ([], [], [])
        text = re.sub(rf"^\s*<@!?{me.id}>\s*", "", message.content)
        text = "\n".join([line for line in [text, *notes] if line] + [f"[file: {path}]" for path in files])
        if not text:
            log.debug("discord message %s has neither text nor files; ignored", message.id)
            return None
        payload = with_audio(IncomingPayload(
            channel=CHANNEL_TYPE, channelProfileId=self._profile_id, sender=message.author.display_name,
            senderId=str(message.author.id), message=text, timestamp=int(message.created_at.timestamp() * 1000),
            messageId=str(message.id), conversationId=str(message.channel.id), files=[str(p) for p in files],
            workflowRunId=run_id), audio)
        return with_groups(payload, member_groups(self._context.profile, message.author))

    async def _download(self, message: discord.Message) -> tuple[list[Path], list[str], list[dict[str, Any]]]:
        """Saves each attachment under files/; a failed download becomes a note in the text. The third list
        is the payload's `audio` (voice messages and audio files, with Discord's duration when given)."""
        paths, notes, audio = [], [], []
        for attachment in message.attachments:
            try:
                data = await attachment.read()
            except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
                log.warning("discord attachment %s of message %s not downloaded: %s",
                            attachment.filename, message.id, exc)
                notes.append(f"[file not downloaded: {attachment.filename}]")
                continue
            paths.append(await self._context.save_attachment(attachment.filename, data,
                                                             conversation=str(message.channel.id)))
            if is_audio(attachment.content_type, attachment.filename):
                audio.append(audio_note(paths[-1], attachment.duration, attachment.content_type))
        return paths, notes, audio

    def _remember(self, message: discord.Message) -> None:
        self._seen[message.id] = message.channel.id
        while len(self._seen) > SEEN_LIMIT:
            self._seen.popitem(last=False)


def _label(message: discord.Message | None, custom_id: str) -> str:
    """The label of the button with this custom_id on the tapped message (the custom_id when not found)."""
    for row in message.components if message is not None else ():
        for item in getattr(row, "children", ()):
            if getattr(item, "custom_id", None) == custom_id:
                return str(getattr(item, "label", None) or custom_id)
    return custom_id


async def _respond(call: Awaitable[object]) -> None:
    """Answers an interaction; a failure (already answered: a redelivered tap) is only logged."""
    try:
        await call
    except (discord.DiscordException, aiohttp.ClientError) as exc:
        log.info("discord: answering a button tap: %s", exc)
