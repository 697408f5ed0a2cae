"""What keeps the runs of this process right beside the other processes sharing its store: recovery at start
(interrupted runs, unreadable states, the coordination index), then a watch that acts on cancel requests from
elsewhere, renews the job locks held here, requeues orphaned runs and applies retention."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from gateway.home import Home
from gateway.stores import Locks
from orchestrator.execution.claims import Claims, job_lock
from orchestrator.execution.coordination import Coordination
from orchestrator.execution.lifecycle import Lifecycle
from orchestrator.runs.base import JOB_LOCK_PREFIX, RunStoreBase
from orchestrator.runs.retention import apply_retention
from orchestrator.runs.state import RunState

log = logging.getLogger("switchyard.orchestrator.executor")

WATCH_SEC = 0.25
RECLAIM_SEC = 15.0
RETENTION_SEC = 3600.0


class Watchdog:
    """Recovers what a previous process left, then watches the runs executing or held here.

    `tasks` and `cancelled` are the executor's own: the runs executing here, and those being cancelled here
    (whether the canceller tells the user). A lock a renewal could not keep is remembered until the run's
    next write asks `taken_over`.
    """

    def __init__(self, *, home: Home, store: RunStoreBase, locks: Locks, claims: Claims, coordination: Coordination,
                 life: Lifecycle, tasks: dict[str, asyncio.Task[None]], cancelled: dict[str, bool],
                 wake: Callable[[], None], runs_retention_days: float):
        self._home = home
        self._store = store
        self._locks = locks
        self._claims = claims
        self._coordination = coordination
        self._life = life
        self._tasks = tasks
        self._cancelled = cancelled
        self._wake = wake
        self._runs_retention_days = runs_retention_days
        self._renewed_at = time.monotonic()  # the job locks held here were last renewed (or taken) then
        self._lapsed: set[str] = set()  # runs whose lock a renewal found held by another, or by nobody

    def recover(self) -> None:
        """Requeues runs whose process died, settles interrupted failures, re-sends undelivered results."""
        self._store.tidy()
        for run_id, reason in self._store.unreadable():  # a corrupt state ends failed_final, its bytes kept
            with self._claims.locked(run_id) as held:
                if held:
                    self._claims.end_unclaimable(run_id, reason)
        for run in self._store.needing_recovery():
            try:
                with self._claims.locked(run.runId) as held:
                    current = self._store.load(run.runId) if held else None
                    if current is not None:
                        self._life.recover(current)
            except Exception as exc:  # that run's trouble, never the others'
                self._claims.failed(run.runId, exc)
        unfinished = self._store.unfinished()
        self._store.restore_active(unfinished)
        queued = {run.runId for run in unfinished if run.state == "queued"}
        for task in self._coordination.pending():
            if task["id"] not in queued:
                self._coordination.dequeue(str(task["id"]))
        self._reclaim_orphans()

    def _reclaim_orphans(self) -> None:
        """Requeues runs marked running whose executing process is gone (its lock went stale)."""
        running = self._store.running_ids()
        if running is None:
            running = [str(entry.get("task_id")) for entry in self._coordination.active()]
        for run_id in running:
            if run_id in self._tasks:
                continue
            with self._claims.locked(run_id) as held:
                run = self._store.load(run_id) if held else None
                if run is not None and run.state == "running":
                    self._life.interrupted(run, "recovered: the process running it is gone")
                elif held:
                    self._coordination.deactivate(run_id)
        self._wake()

    async def watch(self) -> None:
        """Acts on cancel requests from other processes, renews locks, reclaims orphans, applies retention."""
        renewed = reclaimed = time.monotonic()
        cleaned = 0.0
        reclaim_sec = min(RECLAIM_SEC, self._locks.ttl_s) if self._store.shared else RECLAIM_SEC
        while True:
            await asyncio.sleep(WATCH_SEC)
            try:
                self._cancel_requested()
            except Exception:
                log.exception("cannot read cancel requests; trying again shortly")
            now = time.monotonic()
            if now - renewed > self._locks.ttl_s / 3:
                renewed = now
                self._renew(now)
            if now - reclaimed > reclaim_sec:
                reclaimed = now
                try:
                    self._reclaim_orphans()
                except Exception:
                    log.exception("cannot look for orphaned runs; trying again shortly")
            if now - cleaned > RETENTION_SEC or not cleaned:
                cleaned = now
                await self._clean()

    def _renew(self, now: float) -> None:
        """Renews the locks of the runs executing or held here; `_renewed_at` says when that last worked."""
        wanted = [job_lock(run_id) for run_id in [*self._tasks, *self._claims.reserved]]
        try:
            held = set(self._locks.renew(wanted))
        except Exception as exc:
            log.warning("cannot renew the locks of the runs executing here (%s: %s); trying again shortly",
                        type(exc).__name__, exc)
            return
        self._lapsed.update(resource.removeprefix(JOB_LOCK_PREFIX) for resource in wanted if resource not in held)
        self._renewed_at = now

    def taken_over(self, live: RunState) -> bool:
        """Whether another process took the run over (its lock expired unrenewed while the store was away).
        Asked before a write only when the locks may have lapsed: the lock taken again (still ours, or free),
        the stored run must still be this execution's (claimed by this owner at this start)."""
        if live.runId not in self._lapsed and time.monotonic() - self._renewed_at < self._locks.ttl_s / 2:
            return False
        if not self._locks.acquire(job_lock(live.runId)):
            return True
        stored = self._store.load(live.runId)
        if stored is None:
            return True
        this_execution = (stored.job.owner, stored.job.started_at) == (live.job.owner, live.job.started_at)
        if not this_execution and stored.updatedAt != live.updatedAt:  # written since, by another
            return True
        self._lapsed.discard(live.runId)
        return False

    def forget(self, run_id: str) -> None:
        """A run's execution here ended: a lapse of its lock no longer matters."""
        self._lapsed.discard(run_id)

    def _cancel_requested(self) -> None:
        """Cancels the runs executing or held in hand here that another process asked to cancel."""
        asked = [run_id for run_id in self._tasks if run_id not in self._cancelled] + self._claims.in_hand()
        for run_id in self._store.cancel_requests(asked):
            task = self._tasks.get(run_id)
            if task is not None:
                self._cancelled[run_id] = False  # asked from another process: the result tells the user
                task.cancel()
            else:
                self._claims.cancel_in_hand(run_id)

    async def _clean(self) -> None:
        try:
            report = await asyncio.to_thread(apply_retention, self._home, self._store, self._coordination,
                                             self._runs_retention_days,
                                             shared_locks=self._locks if self._store.shared else None)
        except OSError as exc:
            log.warning("coordination retention failed: %s", exc)
            return
        if any(report.values()):
            log.info("coordination retention: %s", report)
