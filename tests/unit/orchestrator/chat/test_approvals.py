"""Tool approvals end to end in a real Gateway (files backend, a fake channel through the gateway's sink):
an agent turn's PermissionAsker (orchestrator/chat/approvals.py) puts the question in the conversation with
buttons and a numbered list; a numbered reply or a button tap answers it (orchestrator/chat/answers.py);
expiry denies and tells the user; an unauthorised sender is refused; a second tap is told it was answered;
an answer from another process (the CLI, the dashboard) reaches the turn; a restart closes what a gone
process left pending."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.app import Gateway
from gateway.approvals import ABANDONED, PENDING, Approval, FileApprovals, operator_answer
from gateway.channelkit.buttons import numbered
from gateway.home import Home
from gateway.models import OutgoingPayload
from gateway.plugin_manager import build_plugin_manager
from gateway.scope import ConversationScope
from gateway.settings import ChannelProfile, ChatToolsSettings, QueueSettings, Settings
from gateway.testing import FakeChannel, async_wait_until, make_incoming
from orchestrator.agents.live import ApprovalOption, ToolApproval
from orchestrator.chat.handler import Orchestrator
from orchestrator.config.default import write_default_orchestrator
from tests.fakes.channels import FakeChannelPlugin
from tests.fakes.orchestrator import NO_CHAT_TOOLS

TOOL = ToolApproval(title="Run: make deploy", detail="deploys the site to production",
                    options=(ApprovalOption("allow-1", "Allow once", "allow_once"),
                             ApprovalOption("always-1", "Always allow", "allow_always"),
                             ApprovalOption("reject-1", "Reject", "reject_once")), tool_call_id="call-7")


class Running:
    """A started gateway with one `fake` profile (ada and bob may talk; only ada may approve), serving the chat
    tools when a test asks for them."""

    def __init__(self, home: Home, *, approvers: list[str] | None = None, chat_tools: bool = False):
        options: dict[str, Any] = {} if approvers is None else {"approvers": approvers}
        self.settings = Settings(queue=QueueSettings(fsync=False, poll_ms=20),
                                 chat_tools=ChatToolsSettings() if chat_tools else NO_CHAT_TOOLS,
                                 channels=[ChannelProfile(id="f1", type="fake", allow_from=["ada", "bob"], **options)])
        self.plugin = FakeChannelPlugin()
        write_default_orchestrator(home.resolve("orchestrators/main"))
        self.gateway = Gateway(home, self.settings, build_plugin_manager(self.settings, extra=[self.plugin]))
        self.events: list[dict[str, Any]] = []
        self.gateway.events.observe(self.events.append)

    @property
    def channel(self) -> FakeChannel:
        return self.plugin.channels["f1"]

    @property
    def orchestrator(self) -> Orchestrator:
        assert isinstance(self.gateway.handler, Orchestrator)
        return self.gateway.handler

    def ask(self, timeout_s: float = 30, **fields: Any) -> asyncio.Task[str | None]:
        """A turn answering a message of ada's in `room` asks to run TOOL."""
        message = make_incoming("deploy please", channel="fake", channelProfileId="f1", conversationId="room",
                                senderId="ada", sender="Ada", **fields)
        asker = self.orchestrator.approvals.asker(message, timeout_s=timeout_s)
        return asyncio.create_task(asker(TOOL))

    async def question(self) -> OutgoingPayload:
        found = await async_wait_until(lambda: [p for p in self.channel.sent if p.buttons])
        return found[-1]  # type: ignore[no-any-return]

    async def reply_containing(self, text: str) -> OutgoingPayload:
        found = await async_wait_until(lambda: [p for p in self.channel.sent if text in p.message])
        return found[-1]  # type: ignore[no-any-return]

    async def say(self, text: str, sender: str = "ada", **fields: Any) -> None:
        await self.channel.inject(text, conversationId="room", senderId=sender, sender=sender.title(), **fields)

    def named(self, event: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == event]


@pytest.fixture
async def running(home: Home) -> AsyncIterator[Running]:
    gateway = Running(home, approvers=["ada"])
    await gateway.gateway.start()
    yield gateway
    await gateway.gateway.stop()


async def test_a_numbered_reply_allows_and_the_turn_gets_the_option(running: Running) -> None:
    turn = running.ask()
    question = await running.question()
    assert question.conversationId == "room" and "make deploy" in question.message
    shown = numbered(question.message, question.buttons)  # what a channel without buttons shows
    assert "1. Allow once" in shown and "3. Reject" in shown and shown.count("Allow once") == 1
    assert [b.label for b in question.buttons] == ["Allow once", "Always allow", "Reject"]
    assert all(b.id.startswith("ap:") and len(b.id.encode()) <= 64 for b in question.buttons)
    await running.say("1")
    assert await asyncio.wait_for(turn, 5) == "allow-1"
    await running.reply_containing("Allowed: Run: make deploy")
    assert [e["approval"] for e in running.named("approval.requested")] == [question.buttons[0].id.split(":")[1]]
    assert running.named("approval.answered")[0]["by"] == "fake:ada"


async def test_a_button_tap_denies(running: Running) -> None:
    turn = running.ask()
    question = await running.question()
    await running.say("Reject", button=question.buttons[2].id)
    assert await asyncio.wait_for(turn, 5) == "reject-1"
    await running.reply_containing("Denied: Run: make deploy")


async def test_no_answer_in_time_denies_and_tells_the_user(running: Running) -> None:
    turn = running.ask(timeout_s=0.5)
    question = await running.question()
    assert await asyncio.wait_for(turn, 5) is None
    await running.reply_containing("No answer in time: denied")
    assert running.named("approval.expired")[0]["reason"] == "no answer in time"
    await running.say("Allow once", button=question.buttons[0].id)
    await running.reply_containing("That request expired")


async def test_an_unauthorised_sender_is_refused_and_a_second_tap_is_told_it_was_answered(running: Running) -> None:
    turn = running.ask()
    question = await running.question()
    await running.say("Allow once", sender="bob", button=question.buttons[0].id)
    await running.reply_containing("You may not answer this request")
    assert not turn.done(), "bob is no approver: the question is still open"
    await running.say("3")
    assert await asyncio.wait_for(turn, 5) == "reject-1"
    await running.say("Allow once", button=question.buttons[0].id)
    late = await running.reply_containing("already answered")
    assert "denied by fake:ada" in late.message
    stored = running.orchestrator.approvals.store.get(question.buttons[0].id.split(":")[1])
    assert stored is not None and stored.choice == "reject-1", "the first answer is kept"


async def test_an_answer_from_another_process_reaches_the_turn(running: Running, home: Home) -> None:
    running.orchestrator.approvals._poll_s = 0.05
    turn = running.ask()
    question = await running.question()
    approval_id = question.buttons[0].id.split(":")[1]
    done, won = operator_answer(FileApprovals(home), approval_id, "allow", by="cli:op")  # another process
    assert won and done.choice == "allow-1"
    assert await asyncio.wait_for(turn, 5) == "allow-1"
    await running.reply_containing("Allowed by the operator (cli:op): Run: make deploy")


async def test_a_bare_number_without_a_pending_approval_is_an_ordinary_message(running: Running) -> None:
    await running.say("42")
    reply = await async_wait_until(lambda: running.channel.sent)
    assert not any("request" in p.message for p in reply), reply


def _gone_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


async def test_a_restart_closes_what_a_gone_process_left_pending(home: Home) -> None:
    import socket

    now = time.time()
    address = {"channel": "fake", "channelProfileId": "f1", "conversationId": "room", "messageId": "m-turn"}
    base = dict(scope=ConversationScope("fake", "f1", "room").key, address=address, title="Run: make deploy",
                options=[{"id": "allow-1", "name": "Allow once", "kind": "allow_once"}],
                created_at=now, expires_at=now + 600)
    store = FileApprovals(home)
    store.request(Approval(id="orphan", owner=f"{socket.gethostname()}:{_gone_pid()}:1", **base))  # type: ignore[arg-type]
    store.request(Approval(id="elsewhere", owner="other-host:1:1", **base))  # type: ignore[arg-type]
    running = Running(home)
    await running.gateway.start()
    try:
        notice = await running.reply_containing("The gateway restarted")
        assert notice.conversationId == "room" and "will be retried" in notice.message
        assert "make deploy" in notice.message
        closed = store.get("orphan")
        assert closed is not None and closed.state == ABANDONED
        assert running.named("approval.expired")[0]["approval"] == "orphan"
        other = store.get("elsewhere")
        assert other is not None and other.state == PENDING, "another host's process is not judged from here"
    finally:
        await running.gateway.stop()


async def test_a_stopped_turn_closes_its_approval(running: Running) -> None:
    turn = running.ask()
    question = await running.question()
    turn.cancel()
    with pytest.raises(asyncio.CancelledError):
        await turn
    stored = running.orchestrator.approvals.store.get(question.buttons[0].id.split(":")[1])
    assert stored is not None and stored.state == "cancelled" and stored.choice is None


def test_without_approvers_every_admitted_sender_may_answer_and_pairing_counts() -> None:
    from gateway.backends.memory import MemoryPairing
    from orchestrator.chat.answers import may_answer

    listed = ChannelProfile(id="p", type="fake", allow_from=["ada"])
    assert may_answer(listed, "ada", None) and not may_answer(listed, "eve", None)
    assert may_answer(ChannelProfile(id="p", type="fake"), "anyone", None), "a profile admitting everyone"
    paired = ChannelProfile(id="p", type="fake", pairing=True)
    store = MemoryPairing()
    code, _ = store.request("p", "eve", "Eve")
    assert not may_answer(paired, "eve", store)
    store.approve(code)
    assert may_answer(paired, "eve", store)
    assert not may_answer(ChannelProfile(id="p", type="fake", approvers=["ada"]), "bob", None)
    assert not may_answer(None, "ada", None), "an unknown profile"


async def test_a_running_gateway_closes_what_another_hosts_dead_process_left_once_past_its_expiry(
        home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("orchestrator.chat.approvals.SWEEP_S", 0.05)
    monkeypatch.setattr("orchestrator.chat.approvals.LATE_GRACE_S", 0.2)
    running = Running(home)
    await running.gateway.start()
    try:
        now = time.time()
        FileApprovals(home).request(Approval(
            id="lost", owner="other-host:1:1", scope=ConversationScope("fake", "f1", "room").key, title="Run: ls",
            address={"channel": "fake", "channelProfileId": "f1", "conversationId": "room", "messageId": "m-x"},
            options=[{"id": "a", "name": "Allow once", "kind": "allow_once"}], created_at=now, expires_at=now))
        await running.reply_containing("No answer in time: denied. Run: ls")
        closed = FileApprovals(home).get("lost")
        assert closed is not None and closed.state == "expired" and closed.reason == "its process did not close it"
    finally:
        await running.gateway.stop()
