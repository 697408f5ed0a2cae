"""A worker on a shared home (key locks on): a key's messages are claimed in order across processes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.disk.locks import LockDirectory
from gateway.home import Home
from gateway.models import IncomingPayload
from gateway.settings import QueueSettings
from gateway.testing import async_wait_until, drop_incoming, make_incoming
from tests.unit.gateway.runtime.test_worker import Harness, ScriptedHandler

Build = Callable[..., Awaitable[Harness]]


@pytest.fixture
async def make_harness(home: Home) -> AsyncIterator[Build]:
    """Builds started worker harnesses with key locks (a shared home), stopped after the test."""
    created: list[Harness] = []

    async def build(handler: ScriptedHandler | None = None, *, locks: LockDirectory, **overrides: Any) -> Harness:
        values: dict[str, Any] = {"max_concurrency": 4, "backoff_initial_ms": 10, "backoff_max_ms": 40,
                                  "fsync": False, **overrides}
        harness = Harness(home, handler or ScriptedHandler(), QueueSettings(**values), locks)
        await harness.start()
        created.append(harness)
        return harness

    yield build
    for harness in created:
        await harness.stop()


class RefusingLocks(LockDirectory):
    """A lock directory where another process holds `refused` keys for one attempt each."""

    def __init__(self, folder: Path, refused: set[str]):
        super().__init__(folder, holder="here")
        self.refused = refused
        self.released_with: list[list[str]] = []  # incoming/ at each release

    def acquire(self, resource: str) -> bool:
        if resource in self.refused:
            self.refused.discard(resource)
            return False
        return super().acquire(resource)

    def release(self, resource: str) -> None:
        self.released_with.append(sorted(os.listdir(self.folder.parents[1] / "queue" / "incoming")))
        super().release(resource)


def _starts(handler: ScriptedHandler) -> list[str]:
    return [m for kind, m in handler.log if kind == "start"]


async def test_a_file_left_for_a_key_held_elsewhere_is_not_overtaken_when_the_key_frees(
    make_harness: Build, home: Home
) -> None:
    handler = ScriptedHandler()
    locks = RefusingLocks(home.coordination / "locks", {"conv:console/console/x"})
    harness = await make_harness(handler, locks=locks)
    harness.drop(make_incoming("first", messageId="1", conversationId="x"), "1.json")
    harness.drop(make_incoming("second", messageId="2", conversationId="x"), "2.json")
    await async_wait_until(lambda: len(harness.replies()) == 2)
    assert _starts(handler) == ["first", "second"]


async def test_stop_releases_a_keys_lock_only_once_its_messages_are_back_in_incoming(
    make_harness: Build, home: Home
) -> None:
    release = asyncio.Event()

    async def hang(message: IncomingPayload) -> str:
        await release.wait()
        return "late"

    locks = RefusingLocks(home.coordination / "locks", set())
    harness = await make_harness(ScriptedHandler(hang), locks=locks, max_concurrency=2)
    harness.drop(make_incoming("a", messageId="a", conversationId="x"), "a.json")
    harness.drop(make_incoming("b", messageId="b", conversationId="x"), "b.json")
    scheduler = harness.worker.scheduler
    await async_wait_until(lambda: scheduler.running == 1 and scheduler.pending_count == 1)  # b claimed, waiting
    await harness.worker.stop(0.05)
    assert locks.released_with == [["a.json", "b.json"]]


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


async def test_a_lock_taken_over_from_a_dead_process_first_brings_back_what_it_had_claimed(
    make_harness: Build, home: Home
) -> None:
    handler = ScriptedHandler()
    locks = LockDirectory(home.coordination / "locks", holder="here")
    harness = await make_harness(handler, locks=locks)
    key = "conv:console/console/x"
    dead = _dead_pid()
    stale = {"holder": f"host:{dead}", "resource": key, "acquired_at": "2030-01-01T00:00:00.000Z",
             "expires_at": "2030-01-01T00:01:00.000Z", "pid": dead}
    locks.path_for(key).write_text(json.dumps(stale))
    folder = home.processing / f"w{dead}"
    folder.mkdir()
    (folder / ".lock").touch()
    drop_incoming(home, make_incoming("older", messageId="1", conversationId="x"), "1.json")
    os.rename(home.incoming / "1.json", folder / "1.json")  # claimed by the process that died
    harness.drop(make_incoming("younger", messageId="2", conversationId="x"), "2.json")
    await async_wait_until(lambda: len(harness.replies()) == 2)
    assert _starts(handler) == ["older", "younger"]
    assert not folder.exists()


async def test_on_a_shared_home_a_fifo_and_a_deep_payload_are_quarantined_before_any_key_is_taken(
    make_harness: Build, home: Home, tmp_path: Path
) -> None:
    harness = await make_harness(locks=LockDirectory(home.coordination / "locks", holder="here"))
    os.mkfifo(tmp_path / "fifo")
    os.rename(tmp_path / "fifo", home.incoming / "fifo.json")
    harness.queue.notice("fifo.json")
    harness.drop(b"[" * 100_000, "deep.json")
    harness.drop(make_incoming("after", messageId="ok"), "ok.json")
    await async_wait_until(lambda: len(harness.replies()) == 1)
    reasons = {name: json.loads((home.failed / f"{name}.error.json").read_bytes())["reason"]
               for name in ("fifo.json", "deep.json")}
    assert reasons["fifo.json"] == "not a regular file: a FIFO" and "not valid JSON" in reasons["deep.json"]
    assert harness.worker.scheduler.locked_keys() == []
