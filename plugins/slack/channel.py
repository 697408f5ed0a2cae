"""The Slack channel: a workspace's messages become incoming payloads, replies go back to Slack."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway import (
    AccessDecision,
    ChannelContext,
    DeliveryError,
    DeliveryJournal,
    DeliveryRecord,
    IncomingPayload,
    NoteMessages,
    OutgoingPayload,
    Part,
    RunThreads,
    Sink,
    audio_note,
    clip_note,
    deliver_note,
    deliver_parts,
    is_audio,
    now_ms,
    replacing_preview,
    reply_parts,
    with_audio,
)
from gateway.api import INTAKE_FAILED_REPLY, ConfigurationError
from gateway.channelkit.groups import with_groups
from plugins.slack.blocks import answered_blocks, button_blocks
from plugins.slack.config import CHANNEL_TYPE, SlackConfig
from plugins.slack.inbound import (
    BotIdentity,
    SlackMessage,
    SlackTap,
    person_message,
    run_ref,
    split_conversation,
    tap_of,
)
from plugins.slack.profile import SlackProfileOptions

if TYPE_CHECKING:
    from plugins.slack.client import SlackApi
    from plugins.slack.groups import UserGroups
    from plugins.slack.transport import HttpTransport, SocketTransport

log = logging.getLogger("switchyard.slack")

STOP_DRAIN_S = 5.0
NOT_YOURS = "You may not answer here."
VISIBLE_TO = "visibleTo"  # an outgoing payload's extra key: the one Slack user who may see it


class SlackChannel:
    """One Slack workspace profile, in Socket Mode or on the HTTP Events API.

    Events are queued in arrival order and taken in by one named task, so a slow download never
    reorders a conversation. The typing indicator is a reaction on the user's message (Slack has
    no typing indicator for bots), removed again when the reply to that message is delivered.
    Progress notes and streamed answers' previews are edited in place (chat.update) and leave the typing
    reaction alone; a preview becomes the final answer's first part. A reply's buttons are an actions block
    under its last chunk; a tap (block_actions, acknowledged at once) is taken in through the same queue as
    messages and becomes a payload with `button`.
    """

    name = CHANNEL_TYPE
    edits_progress = True
    shows_buttons = True
    edit_interval_sec = 1.2
    """chat.update is a Tier 3 method: 50+ calls a minute per workspace (https://api.slack.com/methods/chat.update,
    tiers in https://api.slack.com/apis/rate-limits), i.e. one each 1.2 s; posting is "1 per second" per
    channel."""

    def __init__(self, config: SlackConfig, context: ChannelContext):
        self.profile_id = config.profile_id
        self.config = config
        self.context = context
        self.transport: SocketTransport | HttpTransport | None = None
        self._access = context.access
        self._journal = DeliveryJournal(context.home, config.profile_id)
        self._threads = RunThreads(context.home, config.profile_id)
        self._notes = NoteMessages.kept_for(context.home, config.profile_id)
        self._api: SlackApi | None = None
        self._groups: UserGroups | None = None
        self._bot = BotIdentity(user_id="")
        self._sink: Sink | None = None
        self._intake: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._intake_task: asyncio.Task[None] | None = None
        self._latest: dict[str, tuple[str, str]] = {}
        self._reacted: set[tuple[str, str]] = set()

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self, sink: Sink) -> None:
        """Logs in with the bot token and starts receiving events; raises with a clear reason."""
        self._sink = sink
        bot_token = self._secret("bot_token_env")
        socket_mode = self.config.mode == "socket"
        second = self._secret("app_token_env" if socket_mode else "signing_secret_env")
        problem = SlackProfileOptions.unavailable()
        if problem is not None:
            raise ConfigurationError(problem)
        from plugins.slack.client import SlackApi
        from plugins.slack.transport import HttpTransport, SocketTransport, build_app
        self._api = SlackApi(bot_token, self.config.api_base_url, token_env=self.config.bot_token_env)
        self._bot = await self._api.login()
        from plugins.slack.groups import UserGroups

        self._groups = UserGroups(self._api.web, self.context)
        app = build_app(self._api.web, self._receive, self._receive, None if socket_mode else second)
        if socket_mode:
            self.transport = SocketTransport(app, second, token_env=self.config.app_token_env, name=self.profile_id)
        else:
            self.transport = HttpTransport(app, host=self.config.http_listen, port=self.config.http_port,
                                           path=self.config.http_path)
        await self.transport.start()
        self._intake_task = asyncio.create_task(self._take_in(), name=f"slack:{self.profile_id}:intake")
        log.info("slack %s: connected as %s (%s mode)", self.profile_id, self._bot.user_id, self.config.mode)

    def _secret(self, key: str) -> str:
        value = self.config.secret(key)
        self.context.events.add_secret(value)
        return value

    async def stop(self) -> None:
        """Stops receiving, lets queued events finish for a few seconds, then stops the intake."""
        if self.transport is not None:
            await self.transport.stop()
        if self._intake_task is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._intake.join(), timeout=STOP_DRAIN_S)
            self._intake_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._intake_task
            self._intake_task = None

    # --- inbound -----------------------------------------------------------------------------

    async def _receive(self, event: dict[str, Any]) -> None:
        self._intake.put_nowait(event)

    async def _take_in(self) -> None:
        """Turns queued events into incoming payloads, one at a time; a failure skips only that event."""
        while True:
            event = await self._intake.get()
            try:
                await self._take_in_one(event)
            except Exception as exc:
                log.exception("slack %s: could not take in message %s", self.profile_id, event.get("ts"))
                self.context.events.emit("channel.error", channel=CHANNEL_TYPE, profile=self.profile_id,
                                         reason=f"inbound message {event.get('ts')}: {exc}")
            finally:
                self._intake.task_done()

    async def _take_in_one(self, event: dict[str, Any]) -> None:
        if event.get("type") == "block_actions":
            tap = tap_of(event, self._bot)
            if tap is not None:
                await self._take_in_tap(tap)
            return
        message = person_message(event, self._bot)
        api = self._api
        if message is None or api is None or self._sink is None:
            return
        sender = await api.user_name(message.user)
        decision = self._access.check(message.user, sender)
        if not decision.allowed:
            self._reject(message, sender, decision)
            return
        lines = [message.text] if message.text else []
        files: list[str] = []
        audio: list[dict[str, Any]] = []
        for file in [] if message.edited_ts else message.files:  # an edit's files came with the original
            saved = await self._save_file(file, message.conversation)
            if saved is None:
                lines.append(f"[file not downloaded: {_file_name(file)}]")
            else:
                files.append(str(saved))
                lines.append(f"[file: {saved}]")
                if is_audio(file.get("mimetype"), _file_name(file)):
                    audio.append(audio_note(saved, _seconds(file), file.get("mimetype")))
        run_id = self._threads.run_for(run_ref(message.channel, message.thread_ts or "")) if message.in_thread else None
        payload = IncomingPayload(
            channel=CHANNEL_TYPE, channelProfileId=self.profile_id, sender=sender, senderId=message.user,
            message="\n".join(lines), timestamp=message.timestamp_ms,
            messageId=f"{message.ts}:e{message.edited_ts}" if message.edited_ts else message.ts,
            editOf=message.ts if message.edited_ts else None,
            conversationId=message.conversation, files=files, workflowRunId=run_id)
        payload = with_groups(with_audio(payload, audio), await self._groups_of(message.user))
        self._latest[message.conversation] = (message.channel, message.ts)
        try:
            await self._sink(payload)
        except Exception:  # the event was acknowledged and will not come again: tell the sender
            channel, thread_ts = split_conversation(message.conversation)
            try:
                await api.post_message(channel, INTAKE_FAILED_REPLY, thread_ts)
            except Exception as reply_exc:
                log.warning("slack %s: could not tell the sender either: %s", self.profile_id, reply_exc)
            raise

    async def _take_in_tap(self, tap: SlackTap) -> None:
        """Enqueues a tap as a payload with `button` and the label (its messageId the tap's trigger_id, the
        same if Slack sends it again), then marks the message answered; a refused sender is told as for
        a message (the pairing code in an ephemeral message)."""
        api = self._api
        if api is None or self._sink is None:
            return
        sender = await api.user_name(tap.user)
        decision = self._access.check(tap.user, sender)
        if not decision.allowed:
            self._reject(SlackMessage(channel=tap.channel, ts=tap.trigger_id, user=tap.user, text=tap.label,
                                      thread_ts=tap.thread_ts), sender, decision)
            if not decision.reply:  # (a pairing code, when there is one, tells them already)
                await self._tell_quietly(tap, NOT_YOURS)
            return
        payload = IncomingPayload.model_validate({
            "channel": CHANNEL_TYPE, "channelProfileId": self.profile_id, "sender": sender, "senderId": tap.user,
            "message": tap.label, "timestamp": now_ms(), "messageId": f"tap:{tap.trigger_id}",
            "conversationId": tap.conversation, "button": tap.button})
        payload = with_groups(payload, await self._groups_of(tap.user))
        try:
            await self._sink(payload)
        except Exception:  # acknowledged already: Slack will not send the tap again
            await self._tell_quietly(tap, INTAKE_FAILED_REPLY)
            raise
        if tap.blocks and tap.message_ts:
            try:
                await api.update_message(tap.channel, tap.message_ts, tap.text,
                                         answered_blocks(tap.blocks, tap.label, tap.user))
            except Exception as exc:
                log.info("slack %s: marking a tapped message answered failed: %s", self.profile_id, exc)

    async def _groups_of(self, user: str) -> list[str]:
        """The user groups of a sender (plugins/slack/groups.py; none before login)."""
        return [] if self._groups is None else await self._groups.of(user)

    async def _tell_quietly(self, tap: SlackTap, text: str) -> None:
        """Tells the tapper something in an ephemeral message only they see (failures logged)."""
        channel, thread_ts = split_conversation(tap.conversation)
        try:
            assert self._api is not None
            await self._api.post_ephemeral(channel, tap.user, text, thread_ts)
        except Exception as exc:
            log.warning("slack %s: could not tell %s: %s", self.profile_id, tap.user, exc)

    async def _save_file(self, file: dict[str, Any], conversation: str) -> Path | None:
        """Downloads one shared file into files/; its absolute path, or None when that failed."""
        assert self._api is not None
        try:
            data = await self._api.download(file)
        except Exception as exc:
            log.warning("slack %s: file %s not downloaded: %s", self.profile_id, file.get("id"), exc)
            return None
        return await self.context.save_attachment(_file_name(file), data, conversation=conversation)

    def _reject(self, message: SlackMessage, sender: str, decision: AccessDecision) -> None:
        """Records a refused message and, when the policy says so, queues its answer (a pairing code)."""
        self.context.events.emit("message.rejected", channel=CHANNEL_TYPE, profile=self.profile_id,
                                 conversation=message.conversation, senderId=message.user, reason=decision.reason)
        if decision.reply:  # the pairing code is for the asker's eyes only (see `send`)
            self.context.outbox.write(OutgoingPayload.model_validate({
                "channel": CHANNEL_TYPE, "channelProfileId": self.profile_id, "sender": sender,
                "senderId": message.user, "message": decision.reply, "originalMessage": message.text,
                "timestamp": now_ms(), "messageId": message.ts, "agent": "switchyard",
                "conversationId": message.conversation, VISIBLE_TO: message.user}))

    # --- outbound ----------------------------------------------------------------------------

    async def send(self, outgoing: OutgoingPayload) -> DeliveryRecord:
        """Posts the reply's text chunks, then its files, in the conversation (and thread) it names.

        A reply with `visibleTo: <user id>` (a pairing code) is posted as an ephemeral message only
        that user sees, unless the conversation is a direct message (ids starting with D) anyway.
        A progress note (`progressKey`) edits the message already showing that note, if any.
        """
        api = self._api
        if api is None:
            raise DeliveryError(f"slack {self.profile_id} is not connected")
        conversation = outgoing.conversationId or outgoing.senderId
        if not conversation:
            raise DeliveryError("the reply names neither a conversationId nor a senderId")
        channel, thread_ts = split_conversation(conversation)
        run_id = outgoing.workflowRunId
        visible_to = None if channel.startswith("D") else (outgoing.model_extra or {}).get(VISIBLE_TO)
        if run_id and thread_ts:
            self._threads.remember(run_ref(channel, thread_ts), run_id)

        async def send_part(part: Part) -> str:
            if part.file is not None:
                return await api.upload(channel, thread_ts, part.file.name,
                                        await self.context.read_attachment(outgoing, part.file))
            if visible_to:
                return await api.post_ephemeral(channel, str(visible_to), part.text or "", thread_ts)
            blocks = button_blocks(part.text or "", part.buttons) if part.buttons else None
            ts = await api.post_message(channel, part.text or "", thread_ts, blocks)
            if run_id:
                self._threads.remember(run_ref(channel, ts), run_id)
            return ts

        if outgoing.progress_key and not outgoing.files and not visible_to:
            text = clip_note(outgoing.message, self.config.text_limit)
            return await deliver_note(outgoing, self._notes, text, lambda note: send_part(Part(0, text=note)),
                                      lambda ts, note: api.update_message(channel, ts, note))
        parts = reply_parts(outgoing, self.config.text_limit, shows_buttons=True)
        sender = send_part if visible_to else replacing_preview(
            outgoing, self._notes, send_part, lambda ts, text: api.update_message(channel, ts, text))
        record = await deliver_parts(outgoing, parts, sender, self._journal)
        await self._clear_typing(channel, outgoing.messageId)
        return record

    # --- typing ------------------------------------------------------------------------------

    async def typing(self, conversation: str) -> None:
        """Marks the conversation's latest message with the `typing_reaction` emoji (one call)."""
        target = self._latest.get(conversation)
        if not self.config.typing_reaction or target is None or self._api is None:
            return
        try:
            await self._api.react(*target, self.config.typing_reaction)
        except Exception as exc:
            log.info("slack %s: typing reaction failed: %s", self.profile_id, exc)
            return
        self._reacted.add(target)

    async def _clear_typing(self, channel: str, ts: str) -> None:
        """Removes the typing reaction once the reply to that message is out (best effort)."""
        if (channel, ts) not in self._reacted or self._api is None:
            return
        self._reacted.discard((channel, ts))
        try:
            await self._api.react(channel, ts, self.config.typing_reaction, remove=True)
        except Exception as exc:
            log.info("slack %s: removing the typing reaction failed: %s", self.profile_id, exc)


def _file_name(file: dict[str, Any]) -> str:
    """A shared file's name as the user gave it."""
    return str(file.get("name") or file.get("title") or file.get("id") or "file")


def _seconds(file: dict[str, Any]) -> float | None:
    """A shared audio file's length as Slack reports it (`duration_ms`, on audio clips), else None."""
    duration = file.get("duration_ms")
    return duration / 1000 if isinstance(duration, int | float) else None
