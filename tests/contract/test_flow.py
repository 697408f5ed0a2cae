"""The message path's guarantees, written once and run through the real Gateway of each backend (memory,
files, postgres when SWITCHYARD_TEST_DSN is set) with a scripted handler and fake channels: FIFO per
conversation through retries while other conversations go on, conversations side by side, a repeated
messageId answered once, a dead letter with its bytes and one apology, replies delivered once each in
order, and two hosts on one backend never handling one message twice."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.payloads import APOLOGY
from gateway.testing import async_wait_until
from tests.contract.flow import Flow

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


async def test_a_conversation_waits_for_its_retried_message_while_others_go_on(flow: Flow) -> None:
    host = await flow.host()
    script = flow.script
    script.fail["a1"] = 2
    script.gate["a1"] = lambda: script.answered("b1")  # a1 may succeed only once b1, sent after it, is answered
    await host.send("a1", "room-a")
    await host.send("a2", "room-a")
    await host.send("b1", "room-b")
    await async_wait_until(lambda: len(flow.sent("room-a")) == 2)
    assert flow.texts("room-a") == ["a1 part 1/1", "a2 part 1/1"]
    assert flow.texts("room-b") == ["b1 part 1/1"]
    room_a = [(call.message_id, call.ok) for call in script.calls if call.conversation == "room-a"]
    assert room_a == [("a1", False), ("a1", False), ("a1", True), ("a2", True)]
    a1_done = script.of("a1")[-1].end
    assert script.of("a2")[0].start >= a1_done, "a2 started before a1 was answered"


async def test_conversations_are_handled_side_by_side(flow: Flow) -> None:
    host = await flow.host()
    rooms = [f"room-{n}" for n in range(4)]
    flow.script.together = {f"p{n}" for n in range(4)}
    for n, room in enumerate(rooms):
        await host.send(f"p{n}", room)
    await async_wait_until(lambda: all(flow.sent(room) for room in rooms), 20)
    assert flow.script.peak == 4, "the four conversations were not handled at the same time"


async def test_a_repeated_message_id_is_answered_once(flow: Flow) -> None:
    host = await flow.host()
    await host.send("d1", "room-d")
    await async_wait_until(lambda: flow.sent("room-d"))
    await host.send("d1", "room-d")  # the platform hands the same message over again
    await host.send("d2", "room-d")
    await async_wait_until(lambda: len(flow.sent("room-d")) >= 2)
    assert flow.texts("room-d") == ["d1 part 1/1", "d2 part 1/1"]
    assert [call.message_id for call in flow.script.calls] == ["d1", "d2"]


async def test_a_message_failing_every_attempt_is_a_dead_letter_with_its_bytes_and_one_apology(flow: Flow) -> None:
    host = await flow.host()
    flow.script.fail["x1"] = 99
    sent = await host.send("x1", "room-x")
    await async_wait_until(lambda: flow.sent("room-x"), 20)
    await host.send("x2", "room-x")  # after it in its conversation: whatever x1 still did comes first
    await async_wait_until(lambda: len(flow.sent("room-x")) >= 2)
    assert flow.texts("room-x") == [APOLOGY.format(preview="x1", attempts=3), "x2 part 1/1"]
    assert len(flow.script.of("x1")) == 3  # max_attempts
    dead = host.gateway.backend.dead_letters()
    letters = dead.list_dead()
    assert len(letters) == 1 and letters[0].kind == "message"
    _, data = dead.show(letters[0].name)
    assert data == sent.to_json(), "the dead letter's bytes are not the message as it came in"


async def test_replies_are_delivered_once_each_in_order(flow: Flow) -> None:
    host = await flow.host()
    flow.script.parts.update({"o1": 3, "o2": 2})
    await host.send("o1", "room-o")
    await async_wait_until(lambda: host.plugin.channel is not None)
    host.channel.fail_times = 1  # the platform refuses the first send: it is sent again, once
    await host.send("o2", "room-o")
    await async_wait_until(lambda: len(flow.sent("room-o")) >= 5, 20)
    await host.send("o3", "room-o")
    await async_wait_until(lambda: len(flow.sent("room-o")) >= 6)
    assert flow.texts("room-o") == ["o1 part 1/3", "o1 part 2/3", "o1 part 3/3", "o2 part 1/2", "o2 part 2/2",
                                    "o3 part 1/1"]


async def test_two_hosts_on_one_backend_never_handle_a_message_twice(flow: Flow) -> None:
    # duplicate_window_sec 0: a message claimed twice must show as handled twice, not hide behind the
    # answered index; max_concurrency 2: neither host can take every conversation at once, and with three
    # conversations for four slots a conversation's next message is always ready while one of it runs
    first = await flow.host(max_concurrency=2, duplicate_window_sec=0)
    await flow.host(max_concurrency=2, duplicate_window_sec=0)
    rooms = [f"room-{n}" for n in range(3)]
    # each room's first message waits until both hosts have taken one: a host holds at most two of the three,
    # so the other host must take the third, whichever host is quicker to look (one host alone fails the test)
    for first_of_room in ("h00", "h01", "h02"):
        flow.script.gate[first_of_room] = lambda: len({call.host for call in flow.calls()}) == 2
    sent: dict[str, list[str]] = defaultdict(list)
    for seq in range(30):
        room = rooms[seq % len(rooms)]
        payload = await first.send(f"h{seq:02d}", room)
        sent[room].append(payload.messageId)
    everyone = sorted(m for ids in sent.values() for m in ids)
    await async_wait_until(lambda: {reply.messageId for room in rooms for reply in flow.sent(room)} >= set(everyone),
                           30)
    await flow.stop()  # whatever a host still had in hand is finished or given back before counting
    calls = flow.calls()
    assert sorted(call.message_id for call in calls) == everyone
    assert {call.host for call in calls} == {"host1", "host2"}, "one host did all the work"
    for room, ids in sent.items():
        runs = sorted((call for call in calls if call.conversation == room), key=lambda call: call.start)
        assert [call.message_id for call in runs] == ids, f"{room} handled out of order"
        for earlier, later in zip(runs, runs[1:], strict=False):
            assert earlier.end <= later.start, f"{room}: two of its messages were handled at once"
    assert sorted(reply.messageId for room in rooms for reply in flow.sent(room)) == everyone, \
        "a reply was lost or sent twice"


async def test_an_answered_message_whose_work_failed_later_is_a_dead_letter_that_runs_again_on_retry(
        flow: Flow) -> None:
    host = await flow.host()
    sent = await host.send("L1", "room-l")
    await async_wait_until(lambda: flow.sent("room-l"))
    late = host.plugin.context.dead_letter  # what a run does when its work fails for good after the answer
    name = await async_wait_until(lambda: late(sent, "the run failed", ["boom"]))  # None while still queued
    assert late(sent, "the run failed", ["boom"]) == name, "dead-lettering it again is not one letter"
    dead = host.gateway.backend.dead_letters()
    assert [letter.name for letter in dead.list_dead()] == [name]
    letter, data = dead.show(name)
    assert letter.reason == "the run failed" and data == sent.to_json()
    assert dead.retry([name]) == [name]
    await async_wait_until(lambda: len(flow.sent("room-l")) == 2)
    assert [call.message_id for call in flow.script.calls] == ["L1", "L1"], "the retried letter was not run again"
    assert dead.list_dead() == []


async def test_a_control_message_runs_beside_its_conversations_running_message_and_others_wait(flow: Flow) -> None:
    """`/stop` (gateway.payloads: its own ordering key) is handled while its conversation's message still runs,
    which may end only once `/stop` was answered; the message sent before `/stop` still waits its turn."""
    host = await flow.host()
    script = flow.script
    # `long` ends once /stop's reply is out (not merely its handler returned: the two replies' stores race)
    script.gate["long"] = lambda: "/stop part 1/1" in flow.texts("room-a")
    await host.send("long", "room-a")
    await async_wait_until(lambda: script.of("long"))
    await host.send("next", "room-a")
    await host.send("/stop", "room-a", message_id="stop")
    await async_wait_until(lambda: len(flow.sent("room-a")) == 3)
    assert flow.texts("room-a") == ["/stop part 1/1", "long part 1/1", "next part 1/1"]
    assert [call.ok for call in script.of("long")] == [True], "long waited for /stop, which could not start"
    assert script.of("next")[0].start >= script.of("long")[0].end, "next overtook the running message"
