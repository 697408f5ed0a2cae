"""The postgres backend of one process: taking in, processing, and its place in `switchyard_processes`.

The backend's gateway.backends.runtime.Processing, run by the one runtime (gateway/runtime/composed.py): channels still
write into queue/incoming/, the Intake moves those files into `switchyard_messages`, and the generic Worker
(gateway/runtime/worker.py) runs them from there through PgQueue (gateway/backends/postgres/queue.py), its key
locks in `switchyard_locks` (cross-host), its answers stored at once (gateway/backends/postgres/answering.py),
`max_concurrency` at a time. The process heartbeats every `lease_sec / 4`; one that stops heartbeating
for `lease_sec` is dead, and what it had claimed is put back in its place by any live one (not
counted as attempts). When the database goes away, everything waits and reconnects with backoff, and
says so in the log, the event log and this process's `switchyard_processes.detail`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from typing import Any

import psycopg

from gateway.aio import wait_event
from gateway.backends.postgres import schema
from gateway.backends.postgres.answered import PgAnswered
from gateway.backends.postgres.answering import PgAnswering
from gateway.backends.postgres.dashboard import PgQueueView
from gateway.backends.postgres.db import SharedPool, dsn_from_settings
from gateway.backends.postgres.errors import database_away
from gateway.backends.postgres.intake import Intake
from gateway.backends.postgres.latedead import PgLateDeadLetters
from gateway.backends.postgres.locks import PgLocks
from gateway.backends.postgres.outbox import PgOutbox
from gateway.backends.postgres.outgoing import PgOutgoing
from gateway.backends.postgres.pools import message_pool, sync_message_pool
from gateway.backends.postgres.queue import POLL_S, PgQueue
from gateway.backends.runtime import Processing, QueueView, RuntimeParts, WorkerLoop, WorkerStores
from gateway.channelkit.attachments import extra_file_roots
from gateway.disk.locks import process_instance
from gateway.models import IncomingPayload
from gateway.outbox import BaseOutbox
from gateway.settings import SettingsError
from gateway.telemetry.events import utc_now_iso
from gateway.telemetry.redaction import database_error

log = logging.getLogger("switchyard.pg")
_BACKENDS = itertools.count(1)

STORAGE_ERRORS = (OSError, psycopg.OperationalError, psycopg.InterfaceError)
"""What the Worker waits out on PostgreSQL: the database away (and this host's disk refusing)."""


class PgProcessing(Processing):
    """Everything one process does with the shared queue (its replies: PgOutgoing), run by the one runtime.
    `close_events` stops copying the event log into switchyard_events (its backend attached it)."""

    def __init__(self, parts: RuntimeParts, *, pool: SharedPool | None = None,
                 close_events: Callable[[], None] | None = None):
        home, settings = parts.home, parts.settings
        self.home = home
        self.settings = settings
        self.events = parts.events
        self.role = parts.role
        self.spool = parts.queue  # queue/incoming/, which the intake moves into the table
        self._close_events = close_events
        self.dsn = pool.dsn if pool is not None else dsn_from_settings(settings.queue)
        self.shared = pool or SharedPool(self.dsn)
        try:
            schema.check(self.dsn)
        except schema.SchemaOutdated as exc:
            raise SettingsError(str(exc)) from None
        except Exception as exc:
            raise SettingsError(database_error(exc, self.dsn)) from None
        self.outbox = PgOutbox(home, parts.events, extra_roots=extra_file_roots(home, settings), dsn=self.dsn,
                               pool=self.shared, named_by_message_id=parts.named_by_message_id)
        self._outgoing = PgOutgoing(self.outbox, self.dsn, parts)
        self.holder = process_instance()
        self.detail: dict[str, Any] = {"database": "connected"}
        self.claimer = f"{self.holder}#{next(_BACKENDS)}"  # its claims and key locks: its own, not its process's
        self.queue = PgQueue(self.shared, holder=self.claimer, lease_s=settings.queue.lease_sec, role=self.role,
                             files=(home, settings))
        self.intake: Intake | None = None
        self._pool: Any = None
        self._sync_pool: Any = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()
        self._down_since: str | None = None
        self._sweep_error: str | None = None  # why the last heartbeat failed, the database not being away
        self._pruned_at: float | None = None  # time.monotonic() of the last prune that reached the database

    @property
    def home_mode(self) -> str:
        return "database"

    @property
    def outgoing(self) -> PgOutgoing:
        return self._outgoing

    @property
    def timeout_s(self) -> float:
        """How long a silent worker is taken for alive (`queue.lease_sec`)."""
        return self.settings.queue.lease_sec

    def worker_stores(self, outbox: BaseOutbox) -> WorkerStores:
        """PgQueue, the answered identities, key locks in switchyard_locks (on from the start: hosts share the
        queue), its one-step answer, and the database away as what the Worker waits out."""
        qs = self.settings.queue
        answered = PgAnswered(self.dsn, window_sec=qs.duplicate_window_sec, pool=self.shared)
        locks = PgLocks(self.dsn, holder=self.claimer, ttl_s=qs.lease_sec, pool=self.shared)
        return WorkerStores(self.queue, answered, outbox, locks=locks,
                            store_answer=PgAnswering(self.queue, self.outbox), storage_errors=STORAGE_ERRORS)

    def close_events(self) -> None:
        if self._close_events is not None:
            self._close_events()

    async def start(self, worker: WorkerLoop) -> None:
        """Opens the intake's pools, registers this process, and starts taking in, its heartbeat and a poll."""
        # autocommit, checked without a round trip (gateway.backends.postgres.pools): a message without attachments
        # is taken in by one statement on the event loop
        self._pool = message_pool(self.dsn, min_size=1, max_size=2, timeout=5)
        await self._pool.open()
        # sync connections for the steps that share a transaction with gateway.backends.postgres.files (in threads)
        self._sync_pool = sync_message_pool(self.dsn, min_size=1, max_size=3, timeout=5)
        await asyncio.to_thread(self._sync_pool.open)
        self.intake = Intake(self.spool, self._sync_pool, self.events, home=self.home, settings=self.settings,
                             outbox=self.outbox, async_pool=self._pool, on_database=self._database_state,
                             on_taken=worker.wake)
        for action in await asyncio.to_thread(self.queue.open):
            self.events.emit("queue.recovered", reason=action)
        self._tasks = [asyncio.create_task(self.intake.run(), name="pg-intake"),
                       asyncio.create_task(self._sweep(), name="pg-sweep"),
                       asyncio.create_task(self._poll(worker), name="pg-poll")]

    async def _poll(self, worker: WorkerLoop) -> None:
        """Has the Worker look at the table every POLL_S: rows other hosts took in or put back."""
        while not await wait_event(self._stopping, POLL_S):
            worker.wake()

    def take_in(self) -> bool:
        """A file appeared in incoming/: the intake moves it into the table and then wakes the Worker."""
        if self.intake is not None:
            self.intake.wake()
        return False

    async def prune(self) -> None:
        """Deletes what retention allows from the shared tables (gateway/backends/postgres/maintenance.py: events,
        answered
        identities, sent replies, finished messages) when this process last did so PRUNE_INTERVAL_S ago or
        more, and no other process is pruning; a database that cannot be reached is tried next time."""
        from gateway.backends.postgres import maintenance

        now = time.monotonic()
        if self._pruned_at is not None and now - self._pruned_at < maintenance.PRUNE_INTERVAL_S:
            return
        if await asyncio.to_thread(self._prune):
            self._pruned_at = now

    def _prune(self) -> bool:
        """One attempt; True when it reached the database (pruned, or another process was pruning)."""
        import psycopg

        from gateway.backends.postgres.maintenance import prune_alone

        try:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
                if prune_alone(conn, self.settings, self.home) is None:
                    log.debug("another process is pruning the database: skipped")
            return True
        except psycopg.Error as exc:
            log.debug("pruning the database failed (retried at the next maintenance): %s", exc)
            return False

    def stats(self) -> dict[str, Any]:
        """Its figures beside the Worker's, for `queue_stats`."""
        return {"taken_in": self.intake.taken if self.intake else 0, "database": self.detail.get("database")}

    async def _sweep(self) -> None:
        """Keeps this process's row fresh (its claims are its own while it does), with how the database is."""
        while not await wait_event(self._stopping, self.timeout_s / 4):
            try:
                await asyncio.to_thread(self.queue.heartbeat, self.detail)
            except Exception as exc:
                if database_away(exc) or isinstance(exc, OSError):
                    self._database_state(False, f"{type(exc).__name__}: {exc}")
                else:  # the database answered (or our code failed): not a reason to call it away
                    self._sweep_failed(exc)
            else:
                self._sweep_failed(None)
                self._database_state(True, None)

    def _sweep_failed(self, exc: Exception | None) -> None:
        """Logs a heartbeat failing for another reason than the database being away (once per reason), and
        it working again; tried again at the next one either way."""
        reason = f"{type(exc).__name__}: {exc}" if exc is not None else None
        if reason is not None and reason != self._sweep_error:
            log.error("the sweep failed (retried at the next sweep; the database is not away): %s", reason,
                      exc_info=exc)
            self.events.emit("queue.error", reason=f"sweep failed: {reason}")
        elif reason is None and self._sweep_error is not None:
            log.warning("the sweep works again")
        self._sweep_error = reason

    def _database_state(self, ok: bool, reason: str | None) -> None:
        """Logs and records the database going away and coming back (each once)."""
        if not ok and self._down_since is None:
            self._down_since = utc_now_iso()
            self.detail = {"database": f"reconnecting since {self._down_since}", "reason": reason}
            log.error("the database is unreachable (%s): reconnecting with backoff", reason)
            self.events.emit("queue.error", reason=f"database unreachable, reconnecting: {reason}")
        elif ok and self._down_since is not None:
            self.detail = {"database": "connected", "reconnected_at": utc_now_iso(), "down_since": self._down_since}
            log.warning("the database is back (unreachable since %s)", self._down_since)
            self.events.emit("queue.recovered", reason=f"database reachable again (down since {self._down_since})")
            self._down_since = None

    # --- stop -------------------------------------------------------------------------------

    def stop_intake(self) -> None:
        """Stops taking in (the Worker then finishes what it has; the rest is put back for anyone)."""
        self._stopping.set()
        if self.intake is not None:
            self.intake.stop()

    async def stop(self) -> None:
        """After the Worker stopped: its loops ended, this process removed from switchyard_processes."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        try:
            await asyncio.to_thread(self.queue.close)
        except Exception as exc:
            log.warning("could not remove this process from switchyard_processes: %s", exc)
        if self._pool is not None:
            await self._pool.close()
        if self._sync_pool is not None:
            await asyncio.to_thread(self._sync_pool.close)

    def queue_view(self) -> QueueView:
        return PgQueueView(self.dsn, self.settings.queue, self.home, self.shared)

    def dead_letter(self, message: IncomingPayload, reason: str, errors: list[str]) -> str | None:
        """gateway.api.LateDeadLetter: its row turned dead (gateway/backends/postgres/latedead.py)."""
        return PgLateDeadLetters(self.dsn, self.shared).bury(message, reason, errors)
