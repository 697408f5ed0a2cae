"""orchestrator/execution/executor.py: an execution whose job lock lapsed while it could not renew it (its store
away), and whose run another process took over meanwhile, ends without writing: the run's record holds the
other's execution only (the executor asks the watchdog's `taken_over` before each write; test_watchdog.py
tests the question itself)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import pytest

from gateway.disk.locks import LockDirectory
from gateway.home import Home
from gateway.telemetry.events import EventLog
from gateway.testing import async_wait_until
from orchestrator.execution.claims import job_lock
from orchestrator.execution.executor import RunExecutor
from orchestrator.execution.steps.base import StepOutcome
from orchestrator.runs.state import Conversation, RunState, StepState, run_id_for
from orchestrator.storage.files.runs import RunStore
from tests.fakes.orchestrator import FakeOutbox, make_message

pytestmark = pytest.mark.timeout(30)
TTL_SEC = 2.0  # the job locks' life: `taken_over` is asked once no renewal worked for half of it
LAPSING_TTL_SEC = 1.0  # the first process's, whose lock the test waits to see lapse


class AwayLocks(LockDirectory):
    """A process's lock directory on a store that can go away: while `away`, renewing fails."""

    away = False

    def renew(self, resources: list[str]) -> list[str]:
        if self.away:
            raise OSError("the store is away")
        return super().renew(resources)


class OneStep:
    """The steps of a one-step workflow ("Work", an agent step): each run of it waits for `release`, then
    answers `output`."""

    def __init__(self, output: str) -> None:
        self.output = output
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    def kind_of(self, run: RunState, step_id: str) -> str:
        return "agent"

    def agent_of(self, run: RunState, step_id: str) -> str | None:
        return "worker"

    async def run(self, run: RunState, step_id: str, *_: object) -> StepOutcome:
        self.started.set()
        await self.release.wait()
        return StepOutcome(output=self.output, exit_code=0, duration_ms=1)


class Process:
    """One gateway process's executor on the home's run store, shared as a database is (`shared`); its job locks
    are held as `holder`."""

    def __init__(self, home: Home, holder: str, output: str, ttl_s: float) -> None:
        self.store = RunStore(home, fsync=False)
        self.store.shared = True
        self.locks = AwayLocks(home.coordination / "locks", holder=holder, ttl_s=ttl_s)
        self.steps = OneStep(output)
        self.outbox = FakeOutbox()
        self.executor = RunExecutor(home=home, store=self.store, steps=self.steps,  # type: ignore[arg-type]
                                    events=EventLog(home.logs / f"{holder}.jsonl"), outbox=self.outbox,
                                    locks=self.locks)


@pytest.fixture
async def processes(home: Home) -> AsyncIterator[Callable[..., Process]]:
    started: list[Process] = []

    async def stop_all() -> None:
        for process in reversed(started):
            process.steps.release.set()
            with contextlib.suppress(Exception):
                await process.executor.stop()

    def make(holder: str, output: str, ttl_s: float = TTL_SEC) -> Process:
        process = Process(home, holder, output, ttl_s)
        started.append(process)
        return process

    yield make
    await stop_all()


def _run() -> RunState:
    message = make_message("go")
    run_id = run_id_for(message)
    return RunState(runId=run_id, workflowId="w", orchestratorId="main", message=message.model_dump(mode="json"),
                    conversation=Conversation(channel="console", channelProfileId="console", conversationId="c1"),
                    steps={"Work": StepState(kind="agent", agent="worker")})


async def test_a_run_taken_over_while_its_lock_lapsed_is_not_written_by_its_first_execution(
    home: Home, processes: Callable[..., Process],
) -> None:
    first = processes("first:1", "first's output", LAPSING_TTL_SEC)
    await first.executor.start()
    run = first.executor.begin(_run(), "conv:console/console/c1")
    await asyncio.wait_for(first.steps.started.wait(), 10)  # its step runs: the claim and the step's start written
    claimed = first.store.load(run.runId)
    assert claimed is not None and claimed.state == "running"  # both executors are this process (one owner name):
    first_start = claimed.job.started_at  # an execution is told by its start

    first.locks.away = True  # the store goes away: the first process's lock expires unrenewed
    lock = first.locks.path_for(job_lock(run.runId))
    await async_wait_until(lambda: (info := LockDirectory.read(lock)) is not None and info.expired, 10, 0.05)
    second = processes("second:2", "second's output")
    await second.executor.start()  # takes the orphaned run over (requeued, claimed) and runs its step again
    await asyncio.wait_for(second.steps.started.wait(), 15)
    taken = second.store.load(run.runId)
    assert taken is not None and taken.state == "running" and taken.job.started_at != first_start

    first.locks.away = False  # the store is back; the first's step ends and would write the run's end
    first.steps.release.set()
    await async_wait_until(lambda: run.runId not in first.executor._tasks, 10, 0.05)  # its execution ended
    stored = first.store.load(run.runId)
    assert stored is not None
    assert (stored.state, stored.job.started_at, stored.updatedAt) == ("running", taken.job.started_at,
                                                                       taken.updatedAt), stored.steps["Work"]
    assert first.outbox.payloads == []  # the first sends no result of its own

    second.steps.release.set()  # the second's execution is the run's: it ends it
    ended = await async_wait_until(lambda: (r := second.store.load(run.runId)) is not None and r.finished and r, 15)
    assert (ended.state, ended.steps["Work"].output) == ("done", "second's output")
