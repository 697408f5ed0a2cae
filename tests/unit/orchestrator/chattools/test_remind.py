"""The chat tool `remind` on a running gateway (files backend): a reminder set through the MCP server fires once at
its time in the calling turn's conversation, `/reminders` lists only that conversation's and cancels them, and a
conversation holds at most `chat_tools.max_reminders`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from gateway.home import Home
from gateway.testing import async_wait_until, make_incoming
from orchestrator.chattools.client import ToolFailed, connected
from orchestrator.schedules.reminders import of_conversation
from orchestrator.storage.files.reminders import FileReminders
from tests.unit.orchestrator.chat.test_approvals import Running

pytestmark = pytest.mark.timeout(30)
ROOM, OTHER = "conv:fake/f1/room", "conv:fake/f1/other"


@pytest.fixture
async def running(home: Home) -> AsyncIterator[Running]:
    gateway = Running(home, chat_tools=True)
    await gateway.gateway.start()
    yield gateway
    await gateway.gateway.stop()


async def remind(running: Running, conversation: str = "room", **arguments: str) -> str:
    """A turn answering ada's message in `conversation` calls `remind` over MCP; its answer (ToolFailed: refused)."""
    message = make_incoming("remind me", channel="fake", channelProfileId="f1", conversationId=conversation,
                            senderId="ada", sender="Ada")
    server = running.orchestrator.chat_tools
    async with server.granted(f"conv:fake/f1/{conversation}", None, run_id=f"r-{conversation}", step_id="Reply",
                              reply_to=message, agent="planner") as endpoint:
        assert endpoint is not None
        async with connected(endpoint) as chat:
            try:
                return await chat.call("remind", **arguments)
            except ToolFailed as exc:
                refused = exc
    raise refused  # outside the client's task group, which would wrap it


def texts(running: Running, text: str) -> list[str]:
    return [p.conversationId or "" for p in running.channel.sent if p.message == text]


async def test_a_one_off_fires_once_at_its_time_in_its_conversation_and_is_removed(running: Running,
                                                                                    home: Home) -> None:
    set_at = datetime.now(UTC)
    answer = await remind(running, when="in 1s", text="stand up")
    assert answer.startswith("reminder set: once at") and "1 of at most 20" in answer
    await async_wait_until(lambda: texts(running, "stand up") and running.named("schedule.fired"), 10)
    fired = running.named("schedule.fired")  # emitted just after the message is written
    assert len(fired) == 1 and datetime.fromisoformat(fired[0]["occurrence"]) >= set_at + timedelta(seconds=1)
    await async_wait_until(lambda: not FileReminders(home).all(), 5)  # a one-off that fired is removed
    scheduler = running.orchestrator.scheduler
    assert scheduler is not None
    await scheduler.tick(datetime.now(UTC) + timedelta(minutes=5))  # a later pass finds nothing left to fire
    assert texts(running, "stand up") == ["room"]


async def test_a_token_sets_reminders_only_in_its_own_conversation_and_lists_show_only_theirs(
        running: Running, home: Home) -> None:
    await remind(running, "room", when="in 2h", text="for the room")
    await remind(running, "other", when="0 9 * * 1-5", prompt="summarise the week")
    store = FileReminders(home)
    assert [r.text for r in of_conversation(store, ROOM)] == ["for the room"]
    assert [(r.prompt, r.conversationId) for r in of_conversation(store, OTHER)] == [("summarise the week", "other")]
    await running.say("/reminders")
    listed = await running.reply_containing("Reminders of this conversation")
    assert listed.conversationId == "room" and "1. once at" in listed.message and "for the room" in listed.message
    assert "summarise" not in listed.message and "\n2. " not in listed.message
    await running.channel.inject("/reminders cancel 1", conversationId="other", senderId="bob", sender="Bob")
    await running.reply_containing("Cancelled reminder 1: prompt: summarise the week")
    assert [r.text for r in store.all()] == ["for the room"]  # the other conversation's 1 was its own


async def test_a_cancelled_reminder_never_fires(running: Running, home: Home) -> None:
    await remind(running, when="in 2s", text="never sent")
    await running.say("/reminders cancel 1")
    await running.reply_containing("Cancelled reminder 1: never sent")
    assert FileReminders(home).all() == []
    scheduler = running.orchestrator.scheduler
    assert scheduler is not None
    await scheduler.tick(datetime.now(UTC) + timedelta(seconds=10))  # past its time: nothing fires
    assert texts(running, "never sent") == [] and not running.named("schedule.fired")


async def test_a_reminder_cancelled_after_a_pass_read_it_is_not_fired(running: Running, home: Home) -> None:
    await remind(running, when="in 2s", text="read then cancelled")
    scheduler = running.orchestrator.scheduler
    assert scheduler is not None
    reminders = await scheduler._read_reminders()  # noqa: SLF001 - a pass's read, then the cancel races it
    FileReminders(home).remove(FileReminders(home).all()[0].id)
    for key, schedule in reminders.items():
        await scheduler._pass(key, schedule, datetime.now(UTC) + timedelta(seconds=10))  # noqa: SLF001
    assert texts(running, "read then cancelled") == []
    assert [e["reason"] for e in running.named("schedule.skipped")] == ["cancelled"]


async def test_a_conversation_holds_at_most_max_reminders(running: Running) -> None:
    running.orchestrator.chat_tools.tools.reconfigure(
        running.settings.chat_tools.model_copy(update={"max_reminders": 2}))
    for n in (1, 2):
        await remind(running, when=f"in {n}h", text=f"r{n}")
    with pytest.raises(ToolFailed, match="holds 2 reminders, the most it may"):
        await remind(running, when="in 3h", text="r3")
    assert await remind(running, "other", when="in 3h", text="elsewhere")  # another conversation's own count
    refused = [e for e in running.named("chat_tool.called") if e["result"] == "refused"]
    assert [(e["tool"], e["conversation"]) for e in refused] == [("remind", ROOM)]


async def test_a_bad_time_or_both_text_and_prompt_is_a_tool_error(running: Running) -> None:
    with pytest.raises(ToolFailed, match="not a time"):
        await remind(running, when="tomorrowish", text="x")
    with pytest.raises(ToolFailed, match="in the past"):
        await remind(running, when="2001-01-01T00:00:00", text="x")
    with pytest.raises(ToolFailed, match="exactly one of `text`"):
        await remind(running, when="in 1h", text="x", prompt="y")


async def test_a_prompt_reminder_is_answered_by_the_conversation_s_workflow(running: Running) -> None:
    await remind(running, when="in 1s", prompt="what is due today")
    answered = await async_wait_until(lambda: [p for p in running.channel.sent if "what is due today" in p.message
                                               and p.agent != "reminder"], 15)
    assert answered[0].conversationId == "room" and answered[0].sender == "schedule"
    fired = running.named("schedule.fired")
    assert len(fired) == 1 and fired[0]["conversation"] == "room"


async def test_a_retried_turn_does_not_set_again_a_one_off_that_fired_meanwhile(running: Running,
                                                                                home: Home) -> None:
    """A turn killed after `remind` is retried after the restart and calls it again; when the one-off fired (and
    was removed) before that call, the occurrence claimed under its key says it was set: not set again (seen
    with the real claude, tests/e2e/test_chat_tools_real_clis_more.py, where it fired a second time)."""
    assert (await remind(running, when="in 1s", text="only once")).startswith("reminder set")
    await async_wait_until(lambda: texts(running, "only once") and not FileReminders(home).all(), 10)
    again = await remind(running, when="in 1s", text="only once")  # the same turn's same call, retried
    assert again == "set before the gateway restarted, not set again"
    assert FileReminders(home).all() == []
    assert await remind(running, when="in 1s", text="another one")  # a different call is set
