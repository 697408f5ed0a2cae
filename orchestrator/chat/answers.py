"""Answers to tool approvals given in chat: a tapped approval button (`ap:<approvalId>:<index>`), or, in
a conversation with a pending approval, a bare option number. Only a sender who may answer does: one the
profile admits whose role holds `approval.answer` (orchestrator/chat/access.py; the deprecated `approvers:`
still names who may, gateway/roles.py); an answer counts once, is an audit record, and a second is told the
first one (orchestrator/chat/approvals.py asks; gateway.stores.Approvals keeps them)."""

from __future__ import annotations

import asyncio
import logging
import re
from typing import TYPE_CHECKING

from gateway.approvals import ANSWERED, BUTTON_PREFIX, EXPIRED, Approval, parse_button
from gateway.scope import ConversationScope
from orchestrator.chat.actions import reply
from orchestrator.execution.results import SYSTEM_AGENT

if TYPE_CHECKING:
    from gateway.channelkit.pairing import Pairing
    from gateway.models import IncomingPayload, OutgoingPayload
    from gateway.settings import ChannelProfile, Settings
    from orchestrator.chat.access import Access
    from orchestrator.chat.approvals import ApprovalBroker

log = logging.getLogger("switchyard.orchestrator.approvals")

_NUMBER = re.compile(r"^\s*(\d{1,3})\s*[.)]?\s*$")
UNKNOWN = "That request is no longer pending."
ELSEWHERE = "That request belongs to another conversation."
REFUSED = "You may not answer this request."
OUT_OF_RANGE = "Reply with a number from 1 to {count}."


def may_answer(profile: ChannelProfile | None, sender_id: str, pairing: Pairing | None) -> bool:
    """Whether `sender_id` is one who may answer the profile's approvals: its `approvers` when set, else the
    senders its access admits (`allow_from`, approved pairing; everyone when it has neither). The sender's role
    is checked beside it (Access.may_answer_approvals)."""
    if profile is None:
        return False
    approvers = profile.option("approvers")
    if approvers is not None:
        return sender_id in {str(approver) for approver in approvers}
    listed = profile.allow_from is not None and sender_id in {str(s) for s in profile.allow_from}
    paired = bool(profile.option("pairing", False))
    if listed or (profile.allow_from is None and not paired):
        return True
    return paired and pairing is not None and pairing.is_approved(profile.id, sender_id)


def settled_text(approval: Approval) -> str:
    """What a late answer is told: who answered first and how, or that it expired or was closed."""
    if approval.state == ANSWERED:
        verdict = "allowed" if approval.allowed() else "denied"
        return f"That request was already answered ({verdict} by {approval.answered_by or 'someone'})."
    if approval.state == EXPIRED:
        return "That request expired (denied)."
    return f"That request was closed ({approval.reason or approval.state})."


class ChatAnswers:
    """Turns a chat message that answers an approval into the answer and a short reply."""

    def __init__(self, broker: ApprovalBroker, settings: Settings, pairing: Pairing | None,
                 access: Access | None = None):
        self._broker = broker
        self._settings = settings
        self._pairing = pairing
        self._access = access

    def reconfigure(self, settings: Settings) -> None:
        """Reads who may answer from settings.yaml reloaded while running (each profile's `allow_from`)."""
        self._settings = settings

    async def handle(self, message: IncomingPayload) -> OutgoingPayload | None:
        """The reply when `message` answers an approval (now or too late); None when it is no answer."""
        target = await self._target(message)
        if target is None:
            return None
        answer, settled = await asyncio.to_thread(self._answer, message, *target)
        if settled:
            self._broker.wake(target[0])
        return answer

    async def _target(self, message: IncomingPayload) -> tuple[str, int | None] | None:
        """(approval id, option index, None when unreadable) this message answers, or None."""
        button = message.button
        if button is not None:
            if not button.startswith(BUTTON_PREFIX):
                return None
            parsed = parse_button(button)
            return parsed if parsed is not None else ("", None)
        number = _NUMBER.match(message.message)
        if number is None:
            return None
        scope = ConversationScope.of(message).key
        pending = [a for a in await asyncio.to_thread(self._broker.store.pending) if a.scope == scope]
        return (pending[-1].id, int(number.group(1)) - 1) if pending else None

    def _answer(self, message: IncomingPayload, approval_id: str,
                index: int | None) -> tuple[OutgoingPayload, bool]:
        """(the reply, whether this message settled the approval)."""
        store = self._broker.store
        approval = store.get(approval_id) if approval_id else None
        if approval is None:
            return self._reply(message, UNKNOWN), False
        if approval.scope != ConversationScope.of(message).key:
            return self._reply(message, ELSEWHERE), False
        admitted = may_answer(self._settings.profile(message.profile), message.senderId, self._pairing)
        if not admitted or (self._access is not None and not self._access.may_answer_approvals(message)):
            log.warning("%s may not answer approval %s of %s", message.senderId or "an unnamed sender",
                        approval.id, approval.scope)
            return self._reply(message, REFUSED), False
        if not approval.pending:
            return self._reply(message, settled_text(approval)), False
        if index is None or not 0 <= index < len(approval.options):
            return self._reply(message, OUT_OF_RANGE.format(count=len(approval.options))), False
        done, won = store.settle(approval.id, ANSWERED, choice=approval.options[index]["id"],
                                 by=f"{message.channel}:{message.senderId or message.sender}")
        if not won or done is None:
            return self._reply(message, settled_text(done or approval)), False
        if done.extra.get("question"):  # an agent's question (the chat tool `ask`): the answer, not a verdict
            return self._reply(message, f"Answered: {approval.options[index]['name']}"), True
        if self._access is not None:
            verdict = "allowed" if done.allowed() else "denied"
            self._access.record(message, "approval.answer", f"{verdict} {done.title}", key=done.id,
                                approval=done.id, choice=done.choice)
        return self._reply(message, f"{'Allowed' if done.allowed() else 'Denied'}: {done.title}"), True

    @staticmethod
    def _reply(message: IncomingPayload, text: str) -> OutgoingPayload:
        return reply(message, text, agent=SYSTEM_AGENT)
