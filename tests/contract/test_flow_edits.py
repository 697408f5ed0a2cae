"""Edits through the real Gateway of each backend (memory, files, postgres when SWITCHYARD_TEST_DSN is set),
as a channel's sink hands them over: an edit of a message still waiting is answered once, with the new text,
in that message's place; an edit of a message already answered is answered as a message of its own."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.testing import async_wait_until, make_incoming
from tests.contract.flow import PROFILE, Flow, Host

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=["memory", "files", "postgres"])
async def flow(request: pytest.FixtureRequest, tmp_path: Path,
               monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Flow]:
    dsn = None
    if request.param == "postgres":
        dsn = request.getfixturevalue("db")
        monkeypatch.setenv("SWITCHYARD_DSN", dsn)
    flow = Flow(request.param, tmp_path, dsn=dsn)
    try:
        yield flow
    finally:
        await flow.stop()


async def edit(host: Host, of: str, text: str, conversation: str, sender: str = "u1") -> None:
    """An edit of the message `of` (sent by `sender`; make_incoming's senders are u1), as a channel sinks it:
    its own messageId, `editOf` the original's."""
    payload = make_incoming(text, channel="fake", channelProfileId=PROFILE, conversationId=conversation,
                            messageId=f"{of}:e1", editOf=of, senderId=sender)
    assert host.channel.sink is not None
    await host.channel.sink(payload)


async def test_an_edit_replaces_a_waiting_message_and_follows_an_answered_one(flow: Flow) -> None:
    host = await flow.host()
    assert host is not None
    script = flow.script
    edited: list[bool] = []
    script.gate["e1"] = lambda: edited  # e1 runs until the edit of e2 is in; e2 waits behind it
    await host.send("e1", "room-e")
    await host.send("e2", "room-e")
    await async_wait_until(lambda: script.of("e1"))
    await edit(host, "e2", "e2 edited", "room-e")
    edited.append(True)
    await async_wait_until(lambda: len(flow.sent("room-e")) == 2)
    assert flow.texts("room-e") == ["e1 part 1/1", "e2 edited part 1/1"], "the waiting e2 ran once, edited"
    assert not script.of("e2:e1"), "an edit folded into its original is no message of its own"
    await edit(host, "e1", "e1 edited", "room-e")  # e1 was answered: the edit follows it
    await async_wait_until(lambda: len(flow.sent("room-e")) == 3)
    assert flow.texts("room-e")[2] == "e1 edited part 1/1" and [c.ok for c in script.of("e1:e1")] == [True]


async def test_another_senders_edit_of_a_waiting_message_is_answered_as_its_own_message(flow: Flow) -> None:
    """Issue 32 §5: in a group, 1002's edit naming u1's waiting "deploy staging" leaves it as it is, and is
    handled after it as a message of 1002's, no edit."""
    host = await flow.host()
    assert host is not None
    script = flow.script
    forged: list[bool] = []
    script.gate["busy"] = lambda: forged  # runs until the forged edit is in; "staging" waits behind it
    await host.send("busy", "group")
    await host.send("deploy staging", "group", message_id="staging")
    await async_wait_until(lambda: script.of("busy"))
    await edit(host, "staging", "deploy PRODUCTION", "group", sender="1002")
    forged.append(True)
    await async_wait_until(lambda: len(flow.sent("group")) >= 2)
    assert flow.texts("group")[1] == "deploy staging part 1/1", "u1's waiting message was replaced"
    await async_wait_until(lambda: len(flow.sent("group")) == 3)
    assert flow.texts("group")[2] == "deploy PRODUCTION part 1/1"
    [staging], [own] = script.of("staging"), script.of("staging:e1")
    assert staging.sender == "u1", "u1's message ran as someone else's"
    assert (own.sender, own.edit_of) == ("1002", None), "not a message of its own from its real sender"


async def test_a_waiting_message_edited_into_a_command_is_not_folded_and_the_command_runs_beside(flow: Flow) -> None:
    """A read-only command holds the control key (gateway.payloads): folded into a message that waits under its
    conversation's key it would wait behind the running message, and a command edited into a message would run
    beside it. Such an edit is a message of its own; the original keeps its place and its text."""
    host = await flow.host()
    assert host is not None
    script = flow.script
    script.gate["k1"] = lambda: script.answered("k2:e1")  # k1 ends only once the edit was answered beside it
    await host.send("k1", "room-k")
    await host.send("k2", "room-k")
    await async_wait_until(lambda: script.of("k1"))
    await edit(host, "k2", "/status", "room-k")
    await async_wait_until(lambda: len(flow.sent("room-k")) == 3)
    assert flow.texts("room-k") == ["/status part 1/1", "k1 part 1/1", "k2 part 1/1"]
    assert [c.ok for c in script.of("k1")] == [True], "the edit waited behind the running k1"
