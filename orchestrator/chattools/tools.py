"""What each chat tool does for the turn its token is bound to: the rules, the bounds, the outbox write.

Every tool writes through the outbox like any reply, so a message is delivered once, chunked to the
platform, and in order with the turn's other messages and its final answer (all are outgoing payloads of
the same conversation, stamped in the order they are written). A refusal is a ToolRefused, which the
server returns to the agent as an MCP tool error; nothing here ends the turn.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from gateway.api import Outbox
from gateway.channelkit.attachments import (
    AttachmentPolicy,
    AttachmentRefused,
    attachment_folder,
    open_attachment,
    reply_conversation,
)
from gateway.home import Home
from gateway.models import IncomingPayload, OutgoingPayload
from gateway.settings import ChatToolsSettings
from gateway.telemetry.events import EventLog, now_ms
from orchestrator.agents.live import ApprovalOption, ToolApproval
from orchestrator.chattools.grants import ToolGrant, TurnBinding
from orchestrator.schedules.records import ScheduleRecords
from orchestrator.schedules.reminders import KEY_PREFIX, Reminder, ReminderStore, of_conversation, parse_when

MIB = 1 << 20
NO_ANSWER = "no answer"
SENT_KEY_PREFIX = "chat_tool:"  # the `runState` of a message a chat tool sent: its key, never a run's state
DEFAULT_OPTIONS = ("Yes", "No")
MAX_OPTIONS = 10

Questions = Callable[[IncomingPayload, ToolApproval, float], Awaitable[str | None]]
"""Puts a question with options to the conversation of a message and waits: the chosen option's id, or None
(expired, closed). The handler's is ApprovalBroker.ask, durable like tool approvals."""


class ToolRefused(Exception):
    """A call the tool does not carry out, with the reason the agent is told."""


class ChatTools:
    """The chat tools' behaviour, behind the MCP server (orchestrator/chattools/server.py)."""

    def __init__(self, home: Home, settings: ChatToolsSettings, outbox: Outbox, events: EventLog, *,
                 extra_roots: Sequence[str | os.PathLike[str]] = (), questions: Questions | None = None,
                 on_ask: Callable[[str], None] | None = None,
                 history: Callable[[str], list[dict[str, str]]] | None = None,
                 file_limits: Mapping[str, int] | None = None,
                 reminders: ReminderStore | None = None, on_reminder: Callable[[], None] | None = None,
                 schedules: ScheduleRecords | None = None,
                 roles_of: Callable[[IncomingPayload], Sequence[str]] | None = None):
        """`questions`: how `ask` reaches the chat (None: `ask` is refused); `on_ask(run_id)`: told when a run
        asks, so the messages waiting on that run let its answer through (the executor's `let_go`);
        `history(scope)`: the conversation's recent exchanges, within their 4 KB (ConversationHistory.recent);
        `file_limits`: the largest file per channel type, as its plugin declares it (HandlerContext.file_limits);
        `reminders`: where `remind` stores (None: refused), `on_reminder()`: told when one is set (the Scheduler's
        `wake`); `schedules`: where reminders' occurrences are claimed (a one-off that fired is removed from
        `reminders`; its claim is what tells a turn retried after a crash not to set it again);
        `roles_of(message)`: the roles its sender holds (docs/roles.md), which `conversation_info` names."""
        self._file_limits = dict(file_limits or {})
        self._roles_of = roles_of
        self._reminders = reminders
        self._on_reminder = on_reminder
        self._schedules = schedules
        self._history = history
        self._questions = questions
        self._on_ask = on_ask
        self._home = home
        self._settings = settings
        self._outbox = outbox
        self._events = events
        self._attachments = AttachmentPolicy(home, extra_roots)

    def reconfigure(self, settings: ChatToolsSettings) -> None:
        """Takes the `chat_tools:` section of settings.yaml reloaded while running."""
        self._settings = settings

    async def send_message(self, grant: ToolGrant, text: str) -> str:
        """Posts `text` into the turn's conversation now."""
        turn = self._turn(grant, "send_message")
        if not text.strip():
            raise self._refused(grant, "send_message", "the message is empty")
        self._count_message(grant, "send_message", turn)
        counted = f"(message {turn.messages} of at most {self._settings.max_messages} this turn)"
        if not await self._write(turn, self._reply(turn, text, files=[]), "send_message", text):
            return self._done(grant, "send_message", f"sent before the gateway restarted, not sent again {counted}")
        return self._done(grant, "send_message", f"sent {counted}")

    async def send_file(self, grant: ToolGrant, path: str, caption: str = "") -> str:
        """Sends a file of the conversation's own (its attachments, its runs' folders, `files.extra_roots`)."""
        turn = self._turn(grant, "send_file")
        probe = self._reply(turn, caption, files=[path])
        try:
            with open_attachment(path, lambda real: self._attachments.allows(real, probe)) as handle:
                size = os.fstat(handle.fileno()).st_size
        except AttachmentRefused as exc:
            raise self._refused(grant, "send_file", str(exc)) from None
        limit = self._file_limits.get(turn.reply_to.channel)
        if limit is not None and size > limit:
            raise self._refused(grant, "send_file", f"{path} is {size / MIB:.1f} MB; {turn.reply_to.channel} "
                                                    f"takes files of up to {limit / MIB:g} MB")
        if turn.file_bytes + size > self._settings.max_file_bytes:
            raise self._refused(grant, "send_file", f"this turn may send {self._settings.max_file_bytes} bytes "
                                                    f"of files; {turn.file_bytes} are sent already")
        self._count_message(grant, "send_file", turn)
        turn.file_bytes += size
        if not await self._write(turn, probe, "send_file", f"{path}\0{caption}"):
            return self._done(grant, "send_file", f"{os.path.basename(path)} was sent before the gateway "
                                                  "restarted, not sent again")
        return self._done(grant, "send_file", f"sent {os.path.basename(path)} ({size} bytes)")

    async def ask(self, grant: ToolGrant, question: str, options: Sequence[str] = ()) -> str:
        """Puts `question` to the conversation with `options` as one-tap buttons (a numbered list where a channel
        has none; Yes/No when none are given) and waits for the answer: the option chosen, or "no answer"
        after `chat_tools.ask_timeout_sec`. Only senders allowed in the conversation may answer."""
        turn = self._turn(grant, "ask")
        labels = [str(option).strip() for option in options if str(option).strip()] or list(DEFAULT_OPTIONS)
        if self._questions is None:
            raise self._refused(grant, "ask", "questions are not available here")
        if not question.strip() or len(labels) > MAX_OPTIONS:
            raise self._refused(grant, "ask", f"a question needs text and at most {MAX_OPTIONS} options")
        offered = tuple(ApprovalOption(f"o{n}", label, "allow_once") for n, label in enumerate(labels))
        if self._on_ask is not None:
            self._on_ask(turn.run_id)
        chosen = await self._questions(turn.reply_to, ToolApproval(title=question.strip(), options=offered),
                                       self._settings.ask_timeout_sec)
        answer = next((o.name for o in offered if o.id == chosen), NO_ANSWER)
        return self._done(grant, "ask", answer)

    async def remind(self, grant: ToolGrant, when: str, text: str = "", prompt: str = "") -> str:
        """Sets a reminder in the token's conversation (never one named by the agent): `text` is sent as it is,
        `prompt` is posted for the conversation's workflow to answer; `when` is "in 2h", an ISO time or cron.
        At most `chat_tools.max_reminders` per conversation."""
        turn = self._turn(grant, "remind")
        if self._reminders is None:
            raise self._refused(grant, "remind", "reminders are not available here (the backend keeps none)")
        if bool(text.strip()) == bool(prompt.strip()):
            raise self._refused(grant, "remind", "give exactly one of `text` (sent as it is) and `prompt` "
                                                 "(answered by the conversation's workflow)")
        now = datetime.now(UTC)  # also its creation time: occurrences count from it, so `at` is after it
        try:
            cron, at = parse_when(when, now)
        except ValueError as exc:
            raise self._refused(grant, "remind", str(exc)) from None
        store = self._reminders
        held = await asyncio.to_thread(of_conversation, store, grant.conversation)
        turn.reminders += 1
        digest = hashlib.sha256(f"{turn.run_id}\0{turn.step_id}\0{turn.prompt_key}\0{turn.reminders}\0{when}"
                                f"\0{text}\0{prompt}".encode()).hexdigest()[:12]
        fired = [] if self._schedules is None else await asyncio.to_thread(
            self._schedules.latest, f"{KEY_PREFIX}{digest}", 1)  # a one-off that fired is no longer held
        if fired or any(reminder.id == digest for reminder in held):
            return self._done(grant, "remind", "set before the gateway restarted, not set again")
        limit = self._settings.max_reminders
        if len(held) >= limit:
            raise self._refused(grant, "remind", f"this conversation holds {len(held)} reminders, the most it "
                                                 f"may ({limit}); cancel one with /reminders cancel N")
        message = turn.reply_to
        reminder = Reminder(id=digest, conversation=grant.conversation, profile=message.profile,
                            conversationId=message.conversation, cron=cron, at=at, text=text.strip(),
                            prompt=prompt.strip(), created_at=now)
        await asyncio.to_thread(store.add, reminder)
        if self._on_reminder is not None:
            self._on_reminder()
        return self._done(grant, "remind", f"reminder set: {reminder.when} ({len(held) + 1} of at most {limit} "
                                           "in this conversation; /reminders lists them)")

    def conversation_info(self, grant: ToolGrant) -> dict[str, Any]:
        """Who the turn talks to and where: sender and their roles, channel, profile, conversation, run, the
        message (cut to 4 KB), the recent exchanges (4 KB in all), and `filesFolder`: the conversation's own
        folder, where a file written can be sent."""
        turn = self._turn(grant, "conversation_info")
        message = turn.reply_to
        probe = self._reply(turn, "", files=[])
        folder = attachment_folder(self._home, probe.profile, reply_conversation(probe))
        folder.mkdir(parents=True, exist_ok=True)
        roles = list(self._roles_of(message)) if self._roles_of is not None else None
        info = {"sender": message.sender, "senderId": message.senderId or None, "roles": roles,
                "channel": message.channel,
                "profile": message.profile, "conversationId": message.conversationId or None,
                "runId": turn.run_id, "stepId": turn.step_id, "message": message.message[:4096],
                "filesFolder": str(folder),
                "recentExchanges": self._history(grant.conversation) if self._history is not None else None}
        self._done(grant, "conversation_info", "ok")
        return {key: value for key, value in info.items() if value is not None}

    def _turn(self, grant: ToolGrant, tool: str) -> TurnBinding:
        if grant.bound is None:
            raise self._refused(grant, tool, "no turn of this conversation is running (it ended or was stopped)")
        return grant.bound

    def _count_message(self, grant: ToolGrant, tool: str, turn: TurnBinding) -> None:
        if turn.messages >= self._settings.max_messages:
            raise self._refused(grant, tool, f"this turn may send at most {self._settings.max_messages} messages")
        turn.messages += 1

    @staticmethod
    def _reply(turn: TurnBinding, text: str, *, files: list[str]) -> OutgoingPayload:
        """A message of the turn: text as written (no `[send_file:]` tag is read in it), the files given."""
        reply = OutgoingPayload.reply_to(turn.reply_to, "", agent=turn.agent, timestamp=now_ms(),
                                         workflowRunId=turn.run_id, workflowStepId=turn.step_id)
        return reply.model_copy(update={"message": text, "files": files})

    async def _write(self, turn: TurnBinding, payload: OutgoingPayload, tool: str, content: str) -> bool:
        """Writes the turn's n-th message unless the outbox holds it already (False): a turn retried after a
        crash that sends the same n-th message again does not send it twice.

        The key (`runState` of the payload, which Outbox.holds_result looks up: no store of its own) names the
        step, the turn's prompt, the message's place in the turn and a digest of what it says; a retried turn
        sending something else at that place sends it."""
        digest = hashlib.sha256(f"{tool}\0{content}".encode()).hexdigest()[:12]
        key = f"{SENT_KEY_PREFIX}{turn.step_id or ''}:{turn.prompt_key}:{turn.messages}:{digest}"
        held = await asyncio.to_thread(self._outbox.holds_result, turn.run_id, key, channel=payload.channel,
                                       message_id=payload.messageId)
        if held:
            return False
        await asyncio.to_thread(self._outbox.write, payload.model_copy(update={"runState": key}))
        return True

    def _done(self, grant: ToolGrant, tool: str, result: str) -> str:
        self._emit(grant, tool, "ok", result)
        return result

    def _refused(self, grant: ToolGrant, tool: str, reason: str) -> ToolRefused:
        self._emit(grant, tool, "refused", reason)
        return ToolRefused(reason)

    def _emit(self, grant: ToolGrant, tool: str, result: str, detail: str) -> None:
        run = grant.bound.run_id if grant.bound is not None else None
        self._events.emit("chat_tool.called", tool=tool, conversation=grant.conversation, run=run,
                          result=result, reason=detail)
