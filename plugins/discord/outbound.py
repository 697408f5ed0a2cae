"""How the Discord bot posts: a reply's parts (text chunks, files, buttons) as messages in the conversation or a
DM, the first as a reply to the user's message, and progress notes and previews edited in place."""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any

import aiohttp
import discord

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
    reply_parts,
)
from plugins.discord.buttons import MAX_BUTTONS, buttons_view
from plugins.discord.errors import FAILURES, failure, refusal
from plugins.discord.inbound import Intake

log = logging.getLogger("switchyard.discord")

TEXT_LIMIT = 2000
UNKNOWN_MESSAGE = 10008  # Discord's error code for an edit of a message that was deleted

Target = discord.PartialMessageable | discord.DMChannel


class Poster:
    """Posts one profile's replies through the bot's current client (given each time: a reconnect replaces it)."""

    def __init__(self, context: ChannelContext, threads: RunThreads, journal: DeliveryJournal, notes: NoteMessages,
                 intake: Intake):
        self._context = context
        self._threads = threads
        self._journal = journal
        self._notes = notes
        self._intake = intake

    async def send(self, client: discord.Client, outgoing: OutgoingPayload) -> DeliveryRecord:
        """Posts the text in chunks of ≤ 2000 characters, then the files, the first part as a reply; a
        progress note (`progressKey`) edits the message already showing that note, if any."""
        target = await self._target(client, outgoing)
        reference = self._reference(outgoing, target.id)
        run_id = outgoing.workflowRunId

        async def send_part(part: Part) -> str:
            upload = await self._upload(outgoing, part.file) if part.file is not None else None
            message = await self._post(target, part, upload, reference if part.index == 0 else None)
            if run_id:
                self._threads.remember(str(message.id), run_id)
            return str(message.id)

        async def edit(message_id: str, text: str) -> bool:
            return await self._edit(target, message_id, text)

        if outgoing.progress_key and not outgoing.files:
            text = clip_note(outgoing.message, TEXT_LIMIT)
            return await deliver_note(outgoing, self._notes, text, lambda note: send_part(Part(0, text=note)), edit)
        parts = reply_parts(outgoing, TEXT_LIMIT, shows_buttons=len(outgoing.buttons) <= MAX_BUTTONS)
        record = await deliver_parts(outgoing, parts, replacing_preview(outgoing, self._notes, send_part, edit),
                                     self._journal)
        if run_id:
            self._remember_run(client, outgoing, target.id, run_id)
        return record

    def _remember_run(self, client: discord.Client, outgoing: OutgoingPayload, channel_id: int,
                      run_id: str) -> None:
        """Ties the user's message and, when the conversation is a thread, the thread to the run."""
        if outgoing.messageId.isdigit():
            self._threads.remember(outgoing.messageId, run_id)
        if isinstance(client.get_channel(channel_id), discord.Thread):
            self._threads.remember(str(channel_id), run_id)

    async def _target(self, client: discord.Client, outgoing: OutgoingPayload) -> Target:
        """The channel or thread of the conversation, else a DM with the sender."""
        conversation = outgoing.conversationId or ""
        if conversation.isdigit():
            return client.get_partial_messageable(int(conversation))
        sender = outgoing.senderId or ""
        if not sender.isdigit():
            raise DeliveryError("no Discord channel (conversationId) or user (senderId) to send to")
        try:
            return await client.create_dm(discord.Object(int(sender)))
        except (discord.Forbidden, discord.NotFound) as exc:  # no such user, or no DMs from this bot
            raise PermanentError(f"Discord refused a DM with user {sender}: {refusal(exc)}") from exc
        except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
            raise DeliveryError(f"cannot open a Discord DM with user {sender}: {exc}") from exc

    def _reference(self, outgoing: OutgoingPayload, channel_id: int) -> discord.MessageReference | None:
        """A reply reference to the user's message, unless it is known to be in another channel."""
        if not outgoing.messageId.isdigit():
            return None
        message_id = int(outgoing.messageId)
        seen_in = self._intake.channel_of(message_id)
        if seen_in is not None and seen_in != channel_id:
            return None
        return discord.MessageReference(message_id=message_id, channel_id=channel_id, fail_if_not_exists=False)

    async def _upload(self, outgoing: OutgoingPayload, path: Path) -> discord.File | None:
        """A file of the reply as an in-memory upload (read through the gateway), or None when it may not be sent."""
        try:
            data = await self._context.read_attachment(outgoing, path)
        except (PermanentError, DeliveryError) as exc:
            log.warning("discord: %s is not sent: %s", path, exc)
            return None
        return discord.File(io.BytesIO(data), filename=path.name)

    async def _post(self, target: Target, part: Part, upload: discord.File | None,
                    reference: discord.MessageReference | None) -> discord.Message:
        """Posts one part, turning platform failures into DeliveryError (with retry_after on 429), or
        PermanentError when Discord refuses it for good (403: no access or DMs closed, 404: channel gone)."""
        try:
            try:
                return await self._post_once(target, part, upload, reference)
            except discord.HTTPException as exc:
                if reference is None or exc.status != 400:
                    raise
                log.info("discord refused the reply reference (%s); posting without it", exc)
                return await self._post_once(target, part, _again(upload), None)
        except FAILURES as exc:
            raise failure(exc) from exc

    async def _edit(self, target: Target, message_id: str, text: str) -> bool:
        """Replaces the text of a message the bot posted; False when that message was deleted."""
        try:
            await target.get_partial_message(int(message_id)).edit(content=text)
        except discord.NotFound as exc:
            if exc.code == UNKNOWN_MESSAGE:
                return False
            raise failure(exc) from exc
        except FAILURES as exc:
            raise failure(exc) from exc
        return True

    async def _post_once(self, target: Target, part: Part, upload: discord.File | None,
                         reference: discord.MessageReference | None) -> discord.Message:
        replying: dict[str, Any] = {"reference": reference} if reference is not None else {}
        if part.file is None:
            if part.buttons:
                replying["view"] = buttons_view(part.buttons)
            return await target.send(part.text or "", **replying)
        if upload is None:
            return await target.send(f"[file not sent: {part.file.name} cannot be read]", **replying)
        return await target.send(file=upload, **replying)


def _again(upload: discord.File | None) -> discord.File | None:
    """The same upload, rewound for a second request."""
    if upload is not None:
        upload.reset()
    return upload
