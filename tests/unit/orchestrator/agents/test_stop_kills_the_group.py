"""`/stop` (and a run's cancel) ends the whole process group of the turn it stops, not only its leader.

The provider here is `sh -c 'sleep 60 & wait'`: the shell leads the group and its child holds the shell's stdout and
stderr. Killed alone, the shell leaves the child holding the pipes, and the turn waits out spawn.KILL_GRACE_SEC for
them to close (the child may live on); killed as a group, both are gone at once and the turn ends promptly.
Tested where a user's `/stop` goes: `Orchestrator.handle("/stop")` of a selector turn, and below it
`run_process` stopped (the event ProviderRunner's turn sets) or cancelled (a run's task cancelled).
"""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.api import HandlerContext
from gateway.home import Home
from gateway.models import IncomingPayload
from gateway.outbox import FileOutbox
from gateway.settings import ProviderSettings, QueueSettings, Settings
from gateway.telemetry.events import EventLog
from gateway.testing import async_wait_until, make_incoming
from orchestrator import Orchestrator
from orchestrator.agents.spawn import KILL_GRACE_SEC, ProviderResult, run_process
from tests.fakes.orchestrator import NO_CHAT_TOOLS

PROMPTLY_S = 2.0  # a stopped turn ends within this; killing only the leader makes it wait KILL_GRACE_SEC
assert PROMPTLY_S < KILL_GRACE_SEC
STOPPED_TURN = "Stopped. The agent that was working on your message is stopped."


def _group_with_a_child(pids: Path) -> list[str]:
    """The shell notes its own pid (the group's) and its child's, then waits for the child, which holds the pipes."""
    target = shlex.quote(str(pids))
    return ["sh", "-c", f'sleep 60 & echo "$$ $!" > {target}.tmp && mv {target}.tmp {target}; wait']


async def _started(pids: Path) -> tuple[int, int]:
    """(the shell's pid, its child's), once the shell has written them."""
    await async_wait_until(pids.exists, timeout_s=10)
    leader, child = pids.read_text().split()
    return int(leader), int(child)


def _gone(pid: int) -> bool:
    """Whether a process has exited (no longer in /proc, or a zombie waiting to be reaped)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return True
    return fields[0] == "Z"


async def _nothing_left(leader: int, child: int) -> None:
    """Fails when the shell or its child still runs (soon after the turn ended), and kills what does."""
    try:
        await async_wait_until(lambda: _gone(leader) and _gone(child), timeout_s=PROMPTLY_S)
    except AssertionError:
        raise AssertionError(f"left running: {[pid for pid in (leader, child) if not _gone(pid)]}") from None
    finally:
        for pid in (leader, child):  # a failing test leaves nothing running either
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)


async def _running(pids: Path, tmp_path: Path, stop: asyncio.Event | None = None) -> asyncio.Task[ProviderResult]:
    return asyncio.ensure_future(run_process(
        _group_with_a_child(pids), stdin=None, env=dict(os.environ), cwd=tmp_path, timeout_sec=60,
        max_output=4096, stop=stop))


async def test_a_stopped_process_ends_with_its_child_promptly(tmp_path: Path) -> None:
    pids, stop = tmp_path / "pids", asyncio.Event()
    running = await _running(pids, tmp_path, stop)
    try:
        leader, child = await _started(pids)
        stopped_at = time.monotonic()
        stop.set()
        result = await asyncio.wait_for(running, KILL_GRACE_SEC * 3)
        took = time.monotonic() - stopped_at
    finally:
        running.cancel()  # a run that did not end (its processes are killed as it is cancelled)
    await _nothing_left(leader, child)
    assert took < PROMPTLY_S, f"the stopped run took {took:.1f}s to end: its child held the pipes"
    assert not result.timed_out


async def test_a_cancelled_process_ends_with_its_child_promptly(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    running = await _running(pids, tmp_path)
    try:
        leader, child = await _started(pids)
    finally:
        cancelled_at = time.monotonic()
        running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(running, KILL_GRACE_SEC * 3)
    took = time.monotonic() - cancelled_at
    await _nothing_left(leader, child)
    assert took < PROMPTLY_S, f"the cancelled run took {took:.1f}s to end: its child held the pipes"


async def test_a_process_cancelled_while_it_is_being_started_ends_with_its_child(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's cancel can come while asyncio is still starting the process (on a loaded machine the shell may
    have started its child by then): once started, the whole group is ended, not only the leader."""
    start, spawned, release = asyncio.create_subprocess_exec, asyncio.Event(), asyncio.Event()

    async def slow_start(*argv: str, **options: Any) -> asyncio.subprocess.Process:
        process = await start(*argv, **options)
        spawned.set()
        await release.wait()  # the start has not returned yet: a cancel now comes while it starts
        return process

    monkeypatch.setattr(asyncio, "create_subprocess_exec", slow_start)
    pids = tmp_path / "pids"
    running = await _running(pids, tmp_path)
    try:
        await asyncio.wait_for(spawned.wait(), 10)
        leader, child = await _started(pids)
    finally:
        running.cancel()
        release.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(running, KILL_GRACE_SEC * 3)
    await _nothing_left(leader, child)


CONFIG = """
    selector: {provider: slow}
    diagnostics: {provider: rules}
    reply_within_sec: 30
    agents: {a: {provider: rules}}
    workflows:
      w: {description: Answers, steps: [{id: Reply, agent: a}]}
"""


@pytest.fixture
async def orchestrator(home: Home, tmp_path: Path, events: EventLog, write_config: Callable[[str], Path],
                       start: Callable[[HandlerContext], Awaitable[Orchestrator]]) -> Orchestrator:
    """An Orchestrator whose selector is the shell with a child (it writes the pids to tmp_path/pids)."""
    write_config(CONFIG)
    settings = Settings(chat_tools=NO_CHAT_TOOLS,
                        providers={"slow": ProviderSettings(command=_group_with_a_child(tmp_path / "pids"))},
                        queue=QueueSettings(fsync=False))
    return await start(HandlerContext(home=home, settings=settings, events=events,
                                      outbox=FileOutbox(home, events, fsync=False), queue_stats=dict))


def _message(text: str) -> IncomingPayload:
    return make_incoming(text, senderId="ada", conversationId="c1")


async def test_stop_ends_the_selector_s_process_group_and_its_turn_promptly(
        orchestrator: Orchestrator, tmp_path: Path) -> None:
    asking = asyncio.create_task(orchestrator.handle(_message("what now?")))
    try:
        leader, child = await _started(tmp_path / "pids")
        stopped_at = time.monotonic()
        [answer] = await asyncio.wait_for(orchestrator.handle(_message("/stop")), KILL_GRACE_SEC * 3)
        assert answer.message == STOPPED_TURN
        assert await asyncio.wait_for(asking, KILL_GRACE_SEC * 3) == [], "the stopped message was answered"
        took = time.monotonic() - stopped_at
    finally:
        asking.cancel()  # a turn that did not end (its processes are killed as it is cancelled)
    await _nothing_left(leader, child)
    assert took < PROMPTLY_S, f"/stop took {took:.1f}s to end the turn: the provider's child held its pipes"
