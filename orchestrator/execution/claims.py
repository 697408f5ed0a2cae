"""Which queued runs this process takes (spec 003): the claim pass, the job locks that decide it, and the
runs reserved for a message waiting here. One run that cannot be claimed never holds up the others."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator

from gateway.stores import Locks
from orchestrator.execution.coordination import Coordination
from orchestrator.execution.lifecycle import Lifecycle
from orchestrator.runs.base import JOB_LOCK_PREFIX, RunStoreBase
from orchestrator.runs.jobs import is_due, seconds_until
from orchestrator.runs.state import RunState, UnreadableRun

log = logging.getLogger("switchyard.orchestrator.executor")

IDLE_SEC = 1.0
QUEUED_BATCH = 64  # queued runs read from a shared store per claim pass


def job_lock(run_id: str) -> str:
    """The coordination lock a process holds while it executes a run (`run:<id>` is a message key)."""
    return f"{JOB_LOCK_PREFIX}{run_id}"


class Claims:
    """Claims eligible queued runs, oldest first, while `max_parallel` allows; `start` begins executing
    a claimed run (its task goes into `tasks`, shared with the executor, which releases its lock).

    The queued runs come from coordination/work_queue.json, or from the store when it is shared by
    hosts (postgres). A run reserved here as it is created is kept in hand (it cannot change while its
    lock is held here): it is claimed at once when a slot is free and the last pass left no claimable run
    behind (`begin`), else when a slot frees and every claimable run the last pass left was one of those
    (`freed`), oldest first; either way without the pass's read of the queue, a second take of its lock
    and a read of the run. Anything else waiting for a slot (`_backlog`) makes a freed slot wake a pass.
    A run queued by another process since the last pass (at most IDLE_SEC ago) is seen by the next one.
    """

    def __init__(self, *, store: RunStoreBase, locks: Locks, coordination: Coordination, life: Lifecycle,
                 tasks: dict[str, asyncio.Task[None]], start: Callable[[RunState], None], max_parallel: int):
        self._store = store
        self._locks = locks
        self._coordination = coordination
        self._life = life
        self._tasks = tasks
        self._start = start
        self._max_parallel = max_parallel
        # queued runs whose lock this process holds for a waiting message: the run as created here (kept
        # until claimed, used while its lock was taken less than half the lock TTL ago), else None
        self.reserved: dict[str, tuple[RunState | None, float]] = {}
        self._stuck: set[str] = set()  # runs whose failure could not be recorded either: skipped, said once
        # queued runs whose lock another process held at a pass (reserved for its waiting message): tried
        # again after IDLE_SEC, not at every pass of this process (each try is a statement on a shared store)
        self._held_elsewhere: dict[str, float] = {}
        # whether a claimable run not held in hand here may wait for a slot (a pass left one at capacity,
        # or read a full batch): a slot freeing then wakes a pass
        self._backlog = True
        self._hand_sec = locks.ttl_s / 2  # a lock taken this recently is still held, renewed or not

    def ready(self) -> float:
        """One claim pass; returns how long to sleep before the next."""
        sleep = IDLE_SEC
        now = time.monotonic()
        self._held_elsewhere = {run_id: until for run_id, until in self._held_elsewhere.items() if until > now}
        queued = self.queued()
        self._backlog = len(queued) >= QUEUED_BATCH
        for run_id, next_retry_at in queued:
            if run_id in self._tasks or run_id in self._stuck or run_id in self._held_elsewhere:
                continue
            try:
                wait = seconds_until(next_retry_at)
                if wait > 0:
                    sleep = min(sleep, wait)
                    continue
                if len(self._tasks) >= self._max_parallel:
                    self._backlog = self._backlog or self._in_hand(run_id) is None
                    continue
                self.claim(run_id)
            except Exception as exc:
                self.failed(run_id, exc)
        return max(sleep, 0.01)

    def queued(self) -> list[tuple[str, str | None]]:
        """(run id, next_retry_at) of the queued runs, oldest first: the shared store's, else the home's."""
        shared = self._store.queued(QUEUED_BATCH)
        if shared is not None:
            return shared
        return [(str(task["id"]), (task.get("context") or {}).get("next_retry_at"))
                for task in self._coordination.pending()]

    def reserve(self, run_id: str) -> bool:
        """Takes the run's lock for a message waiting here (kept until this process claims the run)."""
        if run_id in self._tasks or not self._locks.acquire(job_lock(run_id)):
            return False
        self.reserved[run_id] = (None, time.monotonic())
        return True

    def unreserve(self, run_id: str) -> None:
        """Gives back the lock `reserve` took."""
        self.reserved.pop(run_id, None)
        self._locks.release(job_lock(run_id))

    def _in_hand(self, run_id: str) -> RunState | None:
        """The queued run as created here under the lock this process reserved it with, while that lock
        is surely still held; None: it is read (and its lock taken again) when claimed."""
        run, taken = self.reserved.get(run_id, (None, 0.0))
        return run if run is not None and time.monotonic() - taken < self._hand_sec else None

    @contextlib.contextmanager
    def locked(self, run_id: str) -> Iterator[bool]:
        """Holds the run's lock for a short section; yields False when another process (or a task or a
        waiting message of this one) holds it."""
        if run_id in self._tasks or run_id in self.reserved:
            yield False
            return
        held = self._locks.acquire(job_lock(run_id))
        try:
            yield held
        finally:
            if held:
                self._locks.release(job_lock(run_id))

    def created(self, run: RunState) -> bool:
        """A run this process reserved has just been created (no await since): claimed at once when a
        slot is free and no claimable run is known to wait, else kept in hand for `freed`. False: it is
        left to a pass (wake one). A run in hand is not asked whether it was cancelled when it is claimed:
        the executor's watch reads the cancel requests of the runs in hand with those of its tasks."""
        if run.runId not in self.reserved:
            return False
        self.reserved[run.runId] = (run, self.reserved[run.runId][1])
        if self._backlog:
            return False
        if len(self._tasks) >= self._max_parallel:
            return True  # in hand: the next slot to free takes it
        return self._claim_in_hand(run)

    def freed(self) -> bool:
        """A slot freed: claims the runs in hand, oldest first, while slots allow, when nothing else is
        known to wait. False: a pass is due (wake one)."""
        if self._backlog:
            return False
        for run_id in list(self.reserved):
            if len(self._tasks) >= self._max_parallel:
                break
            run = self._in_hand(run_id)
            if run is None or not self._claim_in_hand(run):
                return False
        return True

    def in_hand(self) -> list[str]:
        """The queued runs held in hand here (whose cancel requests the executor's watch reads)."""
        return [run_id for run_id in self.reserved if self._in_hand(run_id) is not None]

    def cancel_in_hand(self, run_id: str) -> None:
        """Ends a run in hand cancelled (another process asked), before it ran; its lock is given back."""
        run, _ = self.reserved.pop(run_id, (None, 0.0))
        if run is None:
            return
        try:
            self._life.cancelled(run)
            self._store.clear_cancel(run_id)
        finally:
            self._locks.release(job_lock(run_id))

    def _claim_in_hand(self, run: RunState) -> bool:
        """Claims a run in hand; False when it is left to a pass (a failure of this host, in the log)."""
        try:
            claimed = self._life.claimed(run)
        except Exception:
            log.exception("cannot claim run %s now; a claim pass takes it", run.runId)
            self._backlog = True
            return False
        self.reserved.pop(run.runId, None)  # the claim's outcome releases the lock now
        self._start(claimed)
        return True

    def claim(self, run_id: str) -> None:
        """Takes the run's lock, checks it is still queued and due, marks it running, starts its task."""
        in_hand = self._in_hand(run_id)
        if in_hand is not None:
            self._claim_in_hand(in_hand)
            return
        if not self._locks.acquire(job_lock(run_id)):
            self._held_elsewhere[run_id] = time.monotonic() + IDLE_SEC
            self.reserved.pop(run_id, None)  # a reservation whose lock expired (the database away) is lost
            return
        self.reserved.pop(run_id, None)  # the claim's outcome releases the lock now
        try:
            run = self._store.read(run_id)
            if run is not None and run.state == "running":  # its process died: the lock was stale
                self._life.interrupted(run, "recovered: the process running it is gone")
                run = self._store.read(run_id)
            if run is None or run.state != "queued":
                if run is None or run.state != "failed":
                    self._coordination.dequeue(run_id)
                self._locks.release(job_lock(run_id))
                return
            if not is_due(run.job.next_retry_at):
                self._locks.release(job_lock(run_id))
                return
            if self._store.cancel_requests([run_id]):
                self._life.cancelled(run)
                self._store.clear_cancel(run.runId)
                self._locks.release(job_lock(run_id))
                return
            run = self._life.claimed(run)
        except Exception:
            self._locks.release(job_lock(run_id))
            raise
        self._start(run)

    def failed(self, run_id: str, exc: Exception) -> None:
        """A claim (or recovery) that raised: this host's trouble waits for the next try; the run's own
        ends it failed_final."""
        if self._store.transient(exc):
            log.warning("cannot claim run %s now (tried again shortly): %s: %s", run_id, type(exc).__name__, exc)
            return
        reason = str(exc) if isinstance(exc, UnreadableRun) else f"cannot be claimed: {type(exc).__name__}: {exc}"
        log.error("run %s ends failed_final, its data kept: %s", run_id, reason, exc_info=exc)
        try:
            with self.locked(run_id) as held:
                if held:
                    self.end_unclaimable(run_id, reason)
        except Exception:
            log.exception("cannot record that run %s failed; it is skipped until the next start", run_id)
            self._stuck.add(run_id)

    def end_unclaimable(self, run_id: str, reason: str) -> None:
        """Ends a run that cannot be claimed (its lock held): failed_final with `reason`, its sender told."""
        try:
            run = self._store.read(run_id)
        except UnreadableRun:
            run = None
            stand_in = self._store.quarantine(run_id, reason)
            if stand_in is not None and stand_in.delivery is None:
                self._life.recover(stand_in)  # tells its sender, as for any undelivered end
        if run is not None and run.state in ("queued", "running"):
            if run.state == "queued":
                run = self._store.transition(run, "running", save=False)
            self._life.failed(run, reason, "fatal")
        self._coordination.dequeue(run_id)
