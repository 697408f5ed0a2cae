"""Tool approvals and roles (orchestrator/chat/answers.py with access.py): a guest may not answer, a member may;
the approval asked and its answer are each one audit record, even when the answering message is handled again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.app import Gateway
from gateway.approvals import operator_answer
from gateway.audit import OPERATOR, AuditRecord, operator_answer_key
from gateway.composition import open_backend
from gateway.home import Home
from gateway.plugin_manager import build_plugin_manager
from gateway.settings import ChannelProfile, QueueSettings, Settings
from gateway.stores import AUDIT
from gateway.testing import FakeChannel, async_wait_until, make_incoming
from orchestrator.chat.handler import Orchestrator
from orchestrator.config.default import write_default_orchestrator
from tests.fakes.channels import FakeChannelPlugin
from tests.fakes.orchestrator import NO_CHAT_TOOLS
from tests.unit.orchestrator.chat.test_approvals import TOOL


class Gated:
    """A started gateway with one `fake` profile: ada a member (the default), eve a guest."""

    def __init__(self, home: Home):
        self.home = home
        profile = ChannelProfile(id="f1", type="fake", allow_from=["ada", "eve"], roles={"guest": ["eve"]})
        self.settings = Settings(chat_tools=NO_CHAT_TOOLS,
                                 queue=QueueSettings(fsync=False, poll_ms=20), channels=[profile])
        self.plugin = FakeChannelPlugin()
        write_default_orchestrator(home.resolve("orchestrators/main"))
        self.gateway = Gateway(home, self.settings, build_plugin_manager(self.settings, extra=[self.plugin]))

    @property
    def channel(self) -> FakeChannel:
        return self.plugin.channels["f1"]

    def ask(self) -> asyncio.Task[str | None]:
        message = make_incoming("deploy please", channel="fake", channelProfileId="f1", conversationId="room",
                                senderId="ada", sender="Ada")
        assert isinstance(self.gateway.handler, Orchestrator)
        asker = self.gateway.handler.approvals.asker(message, timeout_s=30)
        return asyncio.create_task(asker(TOOL))

    async def reply_containing(self, text: str) -> Any:
        return await async_wait_until(lambda: [p for p in self.channel.sent if text in p.message])

    def audit(self) -> list[Any]:
        return open_backend(self.home, self.settings).store(AUDIT).records()


@pytest.fixture
async def gated(home: Home) -> AsyncIterator[Gated]:
    gateway = Gated(home)
    await gateway.gateway.start()
    yield gateway
    await gateway.gateway.stop()


async def test_a_guest_may_not_answer_a_member_may_and_both_are_audited_once(gated: Gated) -> None:
    turn = gated.ask()
    await async_wait_until(lambda: [p for p in gated.channel.sent if p.buttons])
    await gated.channel.inject("1", conversationId="room", senderId="eve", sender="Eve")
    await gated.reply_containing("You may not answer this request.")
    assert not turn.done(), "a guest's answer settled the approval"
    await gated.channel.inject("1", conversationId="room", senderId="ada", sender="Ada", messageId="answer-1")
    assert await asyncio.wait_for(turn, 5) == "allow-1"
    await gated.reply_containing("Allowed: Run: make deploy")
    assert isinstance(gated.gateway.handler, Orchestrator)
    again = make_incoming("1", channel="fake", channelProfileId="f1", conversationId="room", senderId="ada",
                          messageId="answer-1")
    await gated.gateway.handler.handle(again)  # the answering message handled again (a retry): no second record
    records = gated.audit()
    assert [(r.action, r.by) for r in records] == [("approval.request", "fake/f1/ada"),
                                                   ("approval.answer", "fake/f1/ada")], records


async def test_an_operators_answer_from_the_dashboard_or_the_cli_is_one_audit_record(gated: Gated) -> None:
    assert isinstance(gated.gateway.handler, Orchestrator)
    gated.gateway.handler.approvals._poll_s = 0.05  # the turn reads the store for it every 2 s in a gateway
    turn = gated.ask()
    [question] = await async_wait_until(lambda: [p for p in gated.channel.sent if p.buttons])
    approval_id = question.buttons[0].id.split(":")[1]
    store = gated.gateway.handler.approvals.store
    done, won = operator_answer(store, approval_id, "allow", by="dashboard")
    assert won
    assert await asyncio.wait_for(turn, 5) == "allow-1"
    cli_copy = AuditRecord.new(by=OPERATOR, where="cli", action="approval.answer", what="allow",
                               key=operator_answer_key(approval_id))
    assert not open_backend(gated.home, gated.settings).store(AUDIT).append(cli_copy), "recorded twice"
    answer = gated.audit()[-1]
    assert (answer.action, answer.by, answer.where) == ("approval.answer", OPERATOR, "dashboard")
    assert [r.action for r in gated.audit()] == ["approval.request", "approval.answer"]
