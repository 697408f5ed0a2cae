"""Which queued runs this process takes (spec 003): the claim pass, the job locks that decide it, and the
runs reserved for a message waiting here. One run that cannot be claimed never holds up the others."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator

from gateway.locks import Locks
from orchestrator.coordination import Coordination
from orchestrator.jobs import is_due, seconds_until
from orchestrator.lifecycle import Lifecycle
from orchestrator.runbase import RunStoreBase
from orchestrator.runs import UnreadableRun
from orchestrator.runstate import RunState

log = logging.getLogger("switchyard.orchestrator.executor")

IDLE_SEC = 1.0
QUEUED_BATCH = 64  # queued runs read from a shared store per claim pass


def job_lock(run_id: str) -> str:
    """The coordination lock a process holds while it executes a run (`run:<id>` is a message key)."""
    return f"job:{run_id}"


class Claims:
    """Claims eligible queued runs, oldest first, while `max_parallel` allows; `start` begins executing
    a claimed run (its task goes into `tasks`, shared with the executor, which releases its lock).

    The queued runs come from coordination/work_queue.json, or from the store when it is shared by
    hosts (postgres). A run whose claim fails for a reason of its own (its state is not a run, a field
    no code can read) ends failed_final with that reason, its data kept; a failure of this host (a
    full disk, the database away) leaves it queued for the next pass. Either way the pass goes on.
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
        self.reserved: set[str] = set()  # queued runs whose lock this process holds for a waiting message
        self._stuck: set[str] = set()  # runs whose failure could not be recorded either: skipped, said once
        # queued runs whose lock another process held at a pass (reserved for its waiting message): tried
        # again after IDLE_SEC, not at every pass of this process (each try is a statement on a shared store)
        self._held_elsewhere: dict[str, float] = {}

    def ready(self) -> float:
        """One claim pass; returns how long to sleep before the next."""
        sleep = IDLE_SEC
        now = time.monotonic()
        self._held_elsewhere = {run_id: until for run_id, until in self._held_elsewhere.items() if until > now}
        for run_id, next_retry_at in self.queued():
            if len(self._tasks) >= self._max_parallel:
                break
            if run_id in self._tasks or run_id in self._stuck or run_id in self._held_elsewhere:
                continue
            try:
                wait = seconds_until(next_retry_at)
                if wait > 0:
                    sleep = min(sleep, wait)
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
        self.reserved.add(run_id)
        return True

    def unreserve(self, run_id: str) -> None:
        """Gives back the lock `reserve` took."""
        self.reserved.discard(run_id)
        self._locks.release(job_lock(run_id))

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

    def claim(self, run_id: str) -> None:
        """Takes the run's lock, checks it is still queued and due, marks it running, starts its task."""
        if not self._locks.acquire(job_lock(run_id)):
            self._held_elsewhere[run_id] = time.monotonic() + IDLE_SEC
            return
        self.reserved.discard(run_id)  # the claim's outcome releases the lock now
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
