"""The background run executor: claims the oldest eligible job and runs its steps, writing each change through a
store outage; it is started, stopped, cancelled and answered here (orchestrator.execution.watchdog recovers and
watches)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from gateway.aio import wait_event
from gateway.api import LateDeadLetter, Outbox
from gateway.channelkit.backoff import delay as backoff_delay
from gateway.disk.locks import LockDirectory, process_name
from gateway.home import Home
from gateway.models import IncomingPayload
from gateway.stores import Locks
from gateway.telemetry import tracing
from gateway.telemetry.events import EventLog
from orchestrator.agents.live import TurnStopped
from orchestrator.execution.claims import IDLE_SEC, Claims, job_lock
from orchestrator.execution.coordination import Coordination
from orchestrator.execution.lifecycle import Lifecycle
from orchestrator.execution.results import Delivery
from orchestrator.execution.steps import StepFailed, StepOutcome, StepRunner, handoff_env
from orchestrator.execution.steps.base import Progress
from orchestrator.execution.watchdog import WATCH_SEC, Watchdog
from orchestrator.runs.base import RunStoreBase
from orchestrator.runs.retention import RUNS_RETENTION_DAYS
from orchestrator.runs.state import RunState, conversation_key

log = logging.getLogger("switchyard.orchestrator.executor")

CANCEL_WAIT_SEC = 10.0
STORE_RETRY_SEC = (0.2, 5.0)  # first and longest wait before writing a run's state again while its store is away
T = TypeVar("T")


class RunTakenOver(Exception):
    """Another process took the run over while this one could not renew its lock: this execution ends
    without writing (the other one's is the run's)."""


class RunExecutor:
    """Drains queued runs oldest first (spec 003), at most `max_parallel` at once, one process per run.

    Which runs it takes is orchestrator.execution.claims (the queue of the store or the home, the job locks).
    A run whose starting (or answering) message waits in this process is reserved by taking its lock
    before it becomes claimable, so another host never executes it and turns that message's reply
    into a push; the lock is renewed until this process claims the run, and expires with the process.
    """

    def __init__(self, *, home: Home, store: RunStoreBase, steps: StepRunner, events: EventLog, outbox: Outbox,
                 max_parallel: int = 4, lock_ttl_sec: float = 60.0,
                 runs_retention_days: float = RUNS_RETENTION_DAYS, locks: Locks | None = None,
                 dead_letter: LateDeadLetter | None = None):
        """`dead_letter`: the gateway's, for the answered message of a refused run (results.py Delivery)."""
        self._store = store
        self._steps = steps
        self._max_parallel = max_parallel
        owner = process_name()
        self._locks = locks or LockDirectory(home.coordination / "locks", holder=owner, ttl_s=lock_ttl_sec)
        self.coordination = Coordination(home)  # an index and mirrors: the watchdog's recover() rebuilds it
        self.delivery = Delivery(store, outbox, home, here=self._here, dead_letter=dead_letter)
        self.life = Lifecycle(store=store, steps=steps, events=events, coordination=self.coordination,
                              delivery=self.delivery, owner=owner)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._claims = Claims(store=store, locks=self._locks, coordination=self.coordination, life=self.life,
                              tasks=self._tasks, start=self._start, max_parallel=max_parallel)
        self._cancelled: dict[str, bool] = {}  # runs being cancelled here: whether the canceller tells the user
        self._stopping = False  # no run is claimed once `stop` began
        self._wake = asyncio.Event()
        self._background: list[asyncio.Task[None]] = []
        self._watchdog = Watchdog(home=home, store=store, locks=self._locks, claims=self._claims,
                                  coordination=self.coordination, life=self.life, tasks=self._tasks,
                                  cancelled=self._cancelled, wake=self.wake, runs_retention_days=runs_retention_days)

    async def start(self) -> None:
        """Recovers what a previous process left (interrupted runs, undelivered results), then drains."""
        self._watchdog.recover()
        self._background = [asyncio.create_task(self._loop(), name="run-executor"),
                            asyncio.create_task(self._watchdog.watch(), name="run-watchdog")]

    async def stop(self) -> None:
        """Stops claiming; interrupted runs go back to `queued` and resume at the next start."""
        self._stopping = True
        for task in self._background:
            task.cancel()
        running = list(self._tasks.values())
        for task in running:
            task.cancel()
        await asyncio.gather(*self._background, *running, return_exceptions=True)
        for run_id in list(self._claims.reserved):
            self._claims.unreserve(run_id)
        self.coordination.flush()
        self._store.close_events()
        self._store.drop_spares()

    def begin(self, run: RunState, key: str, *, announced: bool = False, waits: bool = False) -> RunState:
        """Stores a new queued run and wakes the executor. A run its starting message `waits` for is
        written without fsync and is not yet the conversation's active run: the message stays unanswered
        (and is retried after a crash, finding or re-creating the same run) until the run ends, with an
        fsynced write before the result is the reply, or `outlived` makes it durable and active before
        an ack. The conversation's next message comes only after that reply, so it never needs the
        active run of a run that ended meanwhile; the commands that run beside it (`/status`, `/stop`:
        gateway.payloads) find the run as the conversation's newest unfinished one (Actions.current_and_last).
        Other runs are durable and active at once."""
        reserved = waits and self._store.shared and self._claims.reserve(run.runId)
        run = self._store.create(run, None if waits else key, durable=not waits)
        self.life.created(run, announced=announced)
        if not (reserved and self._claims.created(run)):
            self.wake()
        return run

    def outlived(self, run: RunState) -> None:
        """A run goes on after its starting message's reply: it becomes its conversation's active run
        and its state is made durable before that reply is written."""
        self._store.set_active(conversation_key(run.payload()), run.runId)
        self._store.sync(run.runId)

    def wake(self) -> None:
        """Looks for eligible jobs now instead of after the idle sleep."""
        self._wake.set()

    def submit(self, run_id: str) -> None:
        """Makes sure an unfinished run is being executed or waits in the queue (a retried message)."""
        self.wake()

    async def outcome(self, run_id: str, timeout_sec: float, current: RunState | None = None) -> RunState | None:
        """Waits for the run to end or ask a question: the run if that became the caller's reply, else None
        (`current`: the run as the caller has just read or written it)."""
        return await self.delivery.outcome(run_id, timeout_sec, current)

    # --- the loop -----------------------------------------------------------------------------

    async def _loop(self) -> None:
        while True:
            self._wake.clear()
            try:
                delay = self._claim_ready()
            except Exception:
                log.exception("claiming runs failed; trying again shortly")
                delay = IDLE_SEC
            await wait_event(self._wake, delay)

    def _claim_ready(self) -> float:
        """One claim pass (orchestrator.execution.claims); returns how long to sleep."""
        return self._claims.ready()

    def _start(self, run: RunState) -> None:
        """Starts executing a run just claimed."""
        self._tasks[run.runId] = asyncio.create_task(self._execute([run]), name=f"run:{run.runId}")

    @tracing.traced("workflow.run", lambda _, live: {"switchyard.run_id": live[0].runId},
                    carrier=lambda _, live: live[0].message)
    async def _execute(self, live: list[RunState]) -> None:
        """Runs a claimed run's steps; `live[0]` is the run as this process last changed it."""
        run_id = live[0].runId
        settled = False  # ended or paused: nothing of it waits for a claim pass
        try:
            settled = await self._run_steps(live)
        except RunTakenOver:
            log.warning("run %s was taken over by another process while its lock could not be renewed; "
                        "this execution of it ends without writing", run_id)
            settled = True
        except TurnStopped:  # its conversation's `/stop` stopped its step (and says so): cancelled, as `/cancel` would
            run = self._current(live)
            if run is not None and not run.finished:
                self._end_cancelled(run, told=True)
        except asyncio.CancelledError:
            run = self._current(live)
            if run_id in self._cancelled:
                if run is not None and not run.finished:
                    self._end_cancelled(run, told=self._cancelled[run_id])
            else:
                if run is not None and run.state == "running":
                    self.life.interrupted(run, "interrupted: the gateway is stopping")
                raise
        except Exception as exc:
            log.exception("run %s failed unexpectedly", run_id)
            try:
                run = self._current(live)
                if run is not None and run.state == "running":
                    self.life.failed(run, f"internal error: {type(exc).__name__}: {exc}", "transient")
            except Exception:  # the store is away: the run, left running, is reclaimed as an orphan
                log.exception("cannot record that run %s failed; it is requeued once its lock lapses", run_id)
        finally:
            self._cancelled.pop(run_id, None)
            self._watchdog.forget(run_id)
            self._tasks.pop(run_id, None)  # first: a run no task executes is an orphan the watchdog reclaims
            self._release(run_id)
            if not settled or not self._freed():
                self.wake()

    def _release(self, run_id: str) -> None:
        """Gives up a run's job lock; one the store cannot drop now expires after its TTL unrenewed."""
        try:
            self._locks.release(job_lock(run_id))
        except Exception as exc:
            log.warning("cannot release the lock of run %s (it expires unrenewed): %s: %s", run_id,
                        type(exc).__name__, exc)

    def _here(self, run_id: str) -> bool:
        """Whether the run executes here or waits here in hand: its end is handed over in this process."""
        return run_id in self._tasks or run_id in self._claims.reserved

    def _freed(self) -> bool:
        """A run ended here: the runs in hand take its slot; False when a claim pass is due instead."""
        if self._stopping:
            return True
        try:
            return self._claims.freed()
        except Exception:
            log.exception("claiming a reserved run failed; a claim pass tries again")
            return False

    def _current(self, live: list[RunState]) -> RunState | None:
        """The run as stored, or as claimed here when the claim was not written yet (it is written with
        the first step's start)."""
        run = self._store.load(live[0].runId)
        return live[0] if run is not None and run.state == "queued" and live[0].state == "running" else run

    async def _run_steps(self, live: list[RunState]) -> bool:
        """Runs the run's steps in order; True when it ended succeeded or paused for input, False when a
        step failed (it may be queued again for a retry)."""
        run = live[0]
        after_step = False
        for step_id in list(run.steps):
            if run.steps[step_id].status == "completed":
                continue
            try:  # a step no longer in its workflow fails here too (StepFailed, fatal)
                if self._steps.kind_of(run, step_id) == "input":
                    tracing.note(**{"switchyard.waits_for_input": step_id})  # its answer resumes it in this trace
                    await self._stored(live, partial(self.life.paused, run, step_id))
                    return True
                live[0] = await self._stored(live, partial(self.life.step_started, run, step_id,
                                                                after_step=after_step))
                outcome: StepOutcome = await self._steps.run(live[0], step_id, self._progress(live, step_id),
                                                             handoff_env(live[0], step_id))
            except StepFailed as exc:
                await self._stored(live, partial(self.life.step_failed, live[0], step_id, exc))
                return False
            run = live[0] = self.life.step_completed(live[0], step_id, outcome)
            after_step = True
        await self._stored(live, partial(self.life.succeeded, run))
        return True

    async def _stored(self, live: list[RunState], write: Callable[[], T]) -> T:
        """Carries out a lifecycle write, tried again with backoff while the store is away (a database
        restarting, a full disk): what a step did is never lost to an outage. Each write starts from the run
        as this process holds it, so a try that failed half way is made whole by the next."""
        failures = 0
        while True:
            try:
                if self._store.shared and self._watchdog.taken_over(live[0]):
                    raise RunTakenOver(live[0].runId)
                return write()
            except Exception as exc:
                if not self._store.transient(exc):
                    raise
                failures += 1
                wait = backoff_delay(failures, STORE_RETRY_SEC[0], STORE_RETRY_SEC[1])
                log.warning("run %s: cannot write its state (%s: %s); trying again in %.1f s", live[0].runId,
                            type(exc).__name__, exc, wait)
                await asyncio.sleep(wait)

    def _progress(self, live: list[RunState], step_id: str) -> Progress:
        def save(fields: dict[str, object]) -> None:
            changes: dict[str, Any] = dict(fields)
            live[0] = self._store.update_step(live[0], step_id, **changes)
        return save

    # --- control ------------------------------------------------------------------------------

    def _end_cancelled(self, run: RunState, *, told: bool = False) -> None:
        self.life.cancelled(run, told=told)
        self._store.clear_cancel(run.runId)

    async def cancel(self, run_id: str, *, told: bool = False) -> tuple[RunState | None, bool]:
        """Stops a run (killing its processes, in this or another process) and marks it cancelled. `told`:
        the caller's reply tells the run's conversation, so the run's own result is not sent, when the
        cancel is carried out here. Returns the run as it is now and whether it was carried out by the
        process executing it elsewhere (which then sends the result, as for any cancel it is asked for)."""
        run = self._store.load(run_id)
        if run is None or run.finished:
            return run, False
        task = self._tasks.get(run_id)
        if task is not None:
            self._cancelled[run_id] = told
            task.cancel()
            await asyncio.wait([task])
            return self._store.load(run_id), False
        with self._claims.locked(run_id) as held:
            current = self._store.load(run_id) if held else None
            if current is not None and not current.finished and current.state != "running":
                self._end_cancelled(current, told=told)
                return self._store.load(run_id), False
        return await self._cancel_elsewhere(run_id), True

    async def _cancel_elsewhere(self, run_id: str) -> RunState | None:
        """Asks the process executing the run to cancel it (through the store) and waits a little."""
        self._store.request_cancel(run_id)
        deadline = time.monotonic() + CANCEL_WAIT_SEC
        while time.monotonic() < deadline:
            run = self._store.load(run_id)
            if run is None or run.finished:
                return run
            await asyncio.sleep(WATCH_SEC)
        return self._store.load(run_id)

    def answer(self, run: RunState, message: IncomingPayload) -> RunState | None:
        """Resumes a run waiting for input with the message text; None when another process holds it.
        Its lock is kept (the run reserved for this process, whose message waits) on a shared store."""
        if not self._claims.reserve(run.runId):
            return None
        current = self._store.load(run.runId)
        step_id = current.currentStep or "" if current is not None else ""
        if current is None or current.state != "waiting_input" or current.steps.get(step_id) is None:
            self._claims.unreserve(run.runId)
            return current
        try:
            resumed = self.life.answered(current, step_id, message.message, message.messageId,
                                         message.sender or message.senderId)
        except BaseException:
            self._claims.unreserve(run.runId)
            raise
        if not self._store.shared:
            self._claims.unreserve(run.runId)
        self.wake()
        return resumed
