"""gateway/events.py: the event log written once per loop turn, with nothing left behind."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from gateway.events import EventLog, read_events


async def test_events_of_a_loop_turn_reach_the_file_in_order_when_the_turn_ends(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl")
    log.write_per_turn(asyncio.get_running_loop())
    for number in range(3):
        log.emit("test.event", number=number)
    await asyncio.sleep(0)
    assert [event["number"] for event in read_events(log.path)] == [0, 1, 2]
    log.close()


async def test_close_writes_the_events_still_waiting_for_the_end_of_the_turn(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl")
    log.write_per_turn(asyncio.get_running_loop())
    log.emit("test.last_words")
    log.close()
    assert [event["event"] for event in read_events(log.path)] == ["test.last_words"]


async def test_an_event_from_another_thread_is_written_at_once(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl")
    log.write_per_turn(asyncio.get_running_loop())
    thread = threading.Thread(target=log.emit, args=("test.from_thread",))
    thread.start()
    thread.join()
    assert [event["event"] for event in read_events(log.path)] == ["test.from_thread"]  # no turn has ended
    log.close()


def test_without_a_running_loop_each_event_is_written_at_once(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl")
    log.emit("test.cli")
    assert [event["event"] for event in read_events(log.path)] == ["test.cli"]
    log.close()
