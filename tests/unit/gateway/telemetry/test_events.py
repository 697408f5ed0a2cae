"""gateway/telemetry/events.py: the event log written once per loop turn, with nothing left behind."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from gateway.telemetry.events import EventLog, read_events


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


async def test_an_event_from_another_thread_comes_after_the_loop_events_emitted_before_it(tmp_path: Path) -> None:
    """A loop hands work to a thread after emitting (job.created, then the thread's job.archived): the
    log keeps that order although the loop's line waits for the end of its turn."""
    log = EventLog(tmp_path / "events.jsonl")
    log.write_per_turn(asyncio.get_running_loop())
    log.emit("job.created")
    thread = threading.Thread(target=log.emit, args=("job.archived",))
    thread.start()
    thread.join()
    await asyncio.sleep(0)  # the turn ends: nothing waits any more
    assert [event["event"] for event in read_events(log.path)] == ["job.created", "job.archived"]
    log.close()


def test_without_a_running_loop_each_event_is_written_at_once(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl")
    log.emit("test.cli")
    assert [event["event"] for event in read_events(log.path)] == ["test.cli"]
    log.close()


class _FullDisk:
    """os.write for the log's descriptor: writes `room` bytes in all, then fails with ENOSPC."""

    def __init__(self, fd: int, room: int):
        self.fd = fd
        self.room = room
        self.real = os.write

    def __call__(self, fd: int, data: bytes | memoryview) -> int:
        if fd != self.fd:
            return self.real(fd, data)
        if self.room <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written = self.real(fd, bytes(data[: self.room]))
        self.room -= written
        return written


def _lines(path: Path) -> list[dict[str, Any]]:
    """Every line of the file, each of which must be a whole JSON object."""
    return [json.loads(line) for line in path.read_bytes().split(b"\n")[:-1]] if path.read_bytes() else []


async def test_a_full_disk_leaves_no_half_line_and_the_next_write_says_how_many_lines_were_dropped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = EventLog(tmp_path / "events.jsonl")
    log.write_per_turn(asyncio.get_running_loop())
    log.emit("test.before")
    await asyncio.sleep(0)
    disk = _FullDisk(log._fd, room=30)  # part of the next turn's first line fits
    monkeypatch.setattr(os, "write", disk)
    for number in range(81):
        log.emit("test.lost", number=number)
    await asyncio.sleep(0)
    assert [event["event"] for event in _lines(log.path)] == ["test.before"]
    log.emit("test.still_full")
    await asyncio.sleep(0)
    disk.room = 1_000_000
    log.emit("test.after")
    await asyncio.sleep(0)
    events = _lines(log.path)
    assert [event["event"] for event in events] == ["test.before", "events.dropped", "test.after"]
    assert events[1]["count"] == 82 and "No space left" in events[1]["reason"]
    log.close()


def test_a_short_write_without_a_loop_is_taken_back_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = EventLog(tmp_path / "events.jsonl")
    monkeypatch.setattr(os, "write", _FullDisk(log._fd, room=10))
    log.emit("test.lost")
    assert log.path.read_bytes() == b""
    monkeypatch.undo()
    log.emit("test.after")
    assert [(event["event"], event.get("count")) for event in _lines(log.path)] == [
        ("events.dropped", 1), ("test.after", None)]
    log.close()


def test_a_fragment_that_cannot_be_taken_back_ends_as_a_line_of_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = EventLog(tmp_path / "events.jsonl")
    monkeypatch.setattr(os, "write", _FullDisk(log._fd, room=10))
    monkeypatch.setattr(os, "ftruncate", _refuse)
    log.emit("test.lost")
    log.emit("test.lost_too")
    monkeypatch.undo()
    log.emit("test.after")
    fragment, *rest = log.path.read_bytes().split(b"\n")[:-1]
    assert len(fragment) == 10
    assert [(event["event"], event.get("count")) for event in map(json.loads, rest)] == [
        ("events.dropped", 2), ("test.after", None)]
    log.close()


def _refuse(fd: int, length: int) -> None:
    raise OSError(errno.EIO, os.strerror(errno.EIO))
