"""The approval broker: turns an agent's request to run a tool into a question in its conversation, and
waits for the answer (gateway.stores.Approvals keeps it durable and shared, so it may come from the chat,
`switchyard approvals`, the dashboard or another host).

`asker(message)` is the PermissionAsker (orchestrator/agents/live.py) of one turn answering `message`. The
question is a reply through the outbox with one button per option (`ap:<approvalId>:<index>`) and the
same options as a numbered list for channels without buttons. An answer given in this process wakes the
waiting turn at once (`wake`); others are read from the store every `poll_s`. No answer by the expiry:
denied (None), the user told. At start, `close_abandoned` closes what a process that is gone left pending.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from gateway.approvals import (
    ABANDONED,
    ADDRESS_FIELDS,
    ANSWERED,
    CANCELLED,
    EXPIRED,
    OPERATOR,
    Approval,
    button_id,
    new_id,
    owner_gone,
)
from gateway.disk.locks import process_instance
from gateway.models import IncomingPayload, OutgoingPayload
from gateway.scope import ConversationScope
from gateway.telemetry import tracing
from gateway.telemetry.events import now_ms
from gateway.telemetry.tracing import CONTENT
from orchestrator.execution.results import SYSTEM_AGENT

if TYPE_CHECKING:
    from gateway.api import Outbox
    from gateway.stores import Approvals
    from gateway.telemetry.events import EventLog
    from orchestrator.agents.live import PermissionAsker, ToolApproval

log = logging.getLogger("switchyard.orchestrator.approvals")

POLL_S = 2.0  # how often a waiting turn reads the store for an answer given elsewhere
LATE_GRACE_S = 60.0  # an approval this long past its expiry is closed by any process (its own is gone)
SWEEP_S = 60.0  # how often a running process looks for approvals left by processes that are gone
QUESTION_HINT = "Answer within {within}."
EXPIRED_TEXT = "⌛ No answer in time: denied. {title}"
QUESTION_EXPIRED_TEXT = "⌛ No answer in time: {title}"
RESTARTED_TEXT = ("⚠️ The gateway restarted while your approval was pending, so this request was closed: {title}. "
                  "Your request will be retried.")


def question_text(approval: Approval, within: str) -> str:
    """The question: the title, the detail and how long it waits. The options are the reply's `buttons`, which a
    channel without buttons shows as a numbered list to answer by number (gateway/channelkit/buttons.py)."""
    asked = "❓ " if approval.extra.get("question") else "🔐 The agent asks to run: "
    lines = [asked + approval.title]
    if approval.detail and approval.detail != approval.title:
        lines.append(approval.detail)
    lines.append(QUESTION_HINT.format(within=within))
    return "\n".join(lines)


def reply_to(approval: Approval, text: str, **extra: Any) -> OutgoingPayload:
    """A reply in the approval's conversation (to the message its turn answers)."""
    incoming = IncomingPayload.model_construct(message="", timestamp=0, **approval.address)
    return OutgoingPayload.reply_to(incoming, text, agent=SYSTEM_AGENT, timestamp=now_ms(), quoted=[text], **extra)


class ApprovalBroker:
    """Asks the chat to approve tool calls for the turns of this process, and closes abandoned ones."""

    def __init__(self, store: Approvals, outbox: Outbox, events: EventLog, *, owner: str | None = None,
                 poll_s: float = POLL_S, on_asked: Callable[[IncomingPayload, Approval], None] | None = None,
                 on_operator: Callable[[Approval], None] | None = None):
        """`on_asked`: told of each approval stored; `on_operator`: of each answered by an operator (the CLI,
        the dashboard) that a turn here waited for (their audit records)."""
        self.store = store
        self._on_asked = on_asked
        self._on_operator = on_operator
        self._outbox = outbox
        self._events = events
        self.owner = owner or process_instance()
        self._poll_s = poll_s
        self._waiting: dict[str, asyncio.Event] = {}

    def asker(self, message: IncomingPayload, *, timeout_s: float) -> PermissionAsker:
        """The PermissionAsker of a turn answering `message` (its conversation gets the question)."""

        async def ask(request: ToolApproval) -> str | None:
            return await self.ask(message, request, timeout_s=timeout_s)

        return ask

    async def ask_question(self, message: IncomingPayload, request: ToolApproval, timeout_s: float) -> str | None:
        """An agent's question to `message`'s conversation (the chat tool `ask`): `ask`, worded as a question."""
        return await self.ask(message, request, timeout_s=timeout_s, question=True)

    def wake(self, approval_id: str) -> None:
        """Tells the turn waiting on `approval_id` here (if any) that it was settled."""
        waiting = self._waiting.get(approval_id)
        if waiting is not None:
            waiting.set()

    @tracing.traced("approval.wait", lambda _, __, r, **_k: {CONTENT + "tool": r.title},
                    lambda chosen: {"switchyard.choice": chosen})
    async def ask(self, message: IncomingPayload, request: ToolApproval, *, timeout_s: float,
                  question: bool = False) -> str | None:
        """Stores the approval, sends the question, waits: the chosen option's id, or None when denied
        without a choice (expired, cancelled). `question`: an agent's question to the chat (the chat tool
        `ask`, docs/chat-tools.md), worded as one, not as a tool approval."""
        approval = self._new(message, request, timeout_s)
        if question:
            approval.extra["question"] = True
        woken = self._waiting[approval.id] = asyncio.Event()
        try:
            await asyncio.to_thread(self.store.request, approval)
            if self._on_asked is not None:
                await asyncio.to_thread(self._on_asked, message, approval)
            self._events.emit("approval.requested", approval=approval.id, channel=message.channel,
                              conversation=message.conversation, title=approval.title)
            buttons = [{"id": button_id(approval.id, index), "label": option["name"]}
                       for index, option in enumerate(approval.options)]
            await self._send(approval, question_text(approval, _duration(timeout_s)), buttons=buttons)
            return await self._wait(approval.id, woken)
        except asyncio.CancelledError:
            self._close(approval.id, CANCELLED, "the turn was stopped")
            raise
        finally:
            self._waiting.pop(approval.id, None)

    def _new(self, message: IncomingPayload, request: ToolApproval, timeout_s: float) -> Approval:
        now = time.time()
        address = {name: getattr(message, name) for name in ADDRESS_FIELDS if getattr(message, name)}
        return Approval(id=new_id(), scope=ConversationScope.of(message).key,
                        address=address, title=request.title, detail=request.detail,
                        options=[{"id": o.id, "name": o.name, "kind": o.kind} for o in request.options],
                        owner=self.owner, created_at=now, expires_at=now + timeout_s,
                        extra={"tool_call_id": request.tool_call_id} if request.tool_call_id else {})

    async def _wait(self, approval_id: str, woken: asyncio.Event) -> str | None:
        while True:
            woken.clear()
            current = await asyncio.to_thread(self.store.get, approval_id)
            if current is None:
                return None
            if not current.pending:
                if current.state == ANSWERED and current.reason == OPERATOR:  # the chat saw no answer: told
                    if self._on_operator is not None:
                        await asyncio.to_thread(self._on_operator, current)
                    verdict = "Allowed" if current.allowed() else "Denied"
                    await self._send(current, f"{verdict} by the operator ({current.answered_by}): {current.title}")
                return self._outcome(current)
            left = current.expires_at - time.time()
            if left <= 0:
                closed, won = await asyncio.to_thread(self.store.settle, approval_id, EXPIRED,
                                                      reason="no answer in time")
                if won and closed is not None:
                    await self._expired(closed)
                    return None
                continue  # answered meanwhile: read it
            with suppress(TimeoutError):
                async with asyncio.timeout(min(self._poll_s, left)):
                    await woken.wait()

    def _outcome(self, approval: Approval) -> str | None:
        if approval.state != ANSWERED:
            return None
        self._events.emit("approval.answered", approval=approval.id, choice=approval.choice,
                          allowed=approval.allowed(), by=approval.answered_by)
        return approval.choice

    async def _expired(self, approval: Approval, reason: str = "no answer in time") -> None:
        self._events.emit("approval.expired", approval=approval.id, reason=reason,
                          channel=approval.address.get("channel"))
        expired = QUESTION_EXPIRED_TEXT if approval.extra.get("question") else EXPIRED_TEXT
        await self._send(approval, expired.format(title=approval.title))

    def _close(self, approval_id: str, state: str, reason: str) -> None:
        """Settles a pending approval at once (a stopped turn: no await is safe any more)."""
        try:
            self.store.settle(approval_id, state, reason=reason)
        except Exception as exc:  # it then expires by its time
            log.warning("cannot close approval %s: %s", approval_id, exc)

    async def _send(self, approval: Approval, text: str, **extra: Any) -> None:
        try:
            await asyncio.to_thread(self._outbox.write, reply_to(approval, text, **extra))
        except OSError as exc:  # the approval is stored: it can still be answered from the CLI or dashboard
            log.warning("cannot send the question of approval %s: %s", approval.id, exc)

    async def keep_sweeping(self, interval_s: float | None = None) -> None:
        """Runs `close_abandoned` every `interval_s` (SWEEP_S) until cancelled: what another host's process
        left when it died is closed once past its expiry, without waiting for a restart there."""
        while True:
            await asyncio.sleep(SWEEP_S if interval_s is None else interval_s)
            try:
                await self.close_abandoned()
            except Exception as exc:  # the store unreachable now: the next sweep tries again
                log.warning("cannot sweep the pending approvals: %s", exc)

    async def close_abandoned(self) -> list[Approval]:
        """Closes the pending approvals whose process is gone (on this host), telling each conversation
        its request will be retried, and those long past their expiry whose process never closed them."""
        closed: list[Approval] = []
        for approval in await asyncio.to_thread(self.store.pending):
            if owner_gone(approval.owner, self.owner):
                done, won = await asyncio.to_thread(self.store.settle, approval.id, ABANDONED,
                                                    reason="the gateway restarted")
                if won and done is not None:
                    self._events.emit("approval.expired", approval=done.id, reason="the gateway restarted",
                                      channel=done.address.get("channel"))
                    await self._send(done, RESTARTED_TEXT.format(title=done.title))
                    closed.append(done)
            elif approval.owner != self.owner and approval.expires_at + LATE_GRACE_S < time.time():
                done, won = await asyncio.to_thread(self.store.settle, approval.id, EXPIRED,
                                                    reason="its process did not close it")
                if won and done is not None:
                    await self._expired(done, "its process did not close it")
                    closed.append(done)
        return closed


def _duration(seconds: float) -> str:
    from gateway.channelkit.access import duration_text

    return duration_text(seconds)
