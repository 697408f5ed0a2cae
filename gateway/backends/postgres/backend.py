"""The postgres backend of one process: taking in, processing, and its place in `switchyard_processes`.

Built by the Gateway when `queue.backend` is `postgres`, instead of the FileQueue's Worker: channels
still write into queue/incoming/, the Intake moves those files into the database, and a
Procrastinate worker in the same event loop runs the jobs (MessageProcessor), `max_concurrency` at
a time. The worker heartbeats every `lease_sec / 4`; a process that stops heartbeating for
`lease_sec` is dead, and the jobs it was running are retried by any live one (not counted as
attempts). When the database goes away, everything waits and reconnects with backoff, and says so
in the log, the event log and this process's `switchyard_processes.detail`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable, Collection
from typing import Any

from gateway.api import Handler
from gateway.backends.postgres import schema
from gateway.backends.postgres.db import SharedPool, dsn_from_settings
from gateway.backends.postgres.errors import database_away
from gateway.backends.postgres.intake import Intake
from gateway.backends.postgres.keyjobs import QUEUE, TASK, retry_running
from gateway.backends.postgres.outbox import PgOutbox
from gateway.backends.postgres.pools import message_pool, procrastinate_pool, sync_message_pool
from gateway.backends.postgres.processing import KeepPlace, MessageProcessor
from gateway.channelkit.backoff import delay as backoff_delay
from gateway.home import Home
from gateway.models import IncomingPayload
from gateway.runtime.aio import wait_event
from gateway.runtime.locks import process_instance
from gateway.settings import Settings, SettingsError
from gateway.spool.queue import FileQueue
from gateway.storable import safe_json
from gateway.telemetry.events import EventLog, utc_now_iso
from gateway.telemetry.redaction import database_error

log = logging.getLogger("switchyard.pg")

FETCH_POLL_S = 0.25  # besides notifications: when a rescheduled (parked, backing-off) job is due
RECONNECT_MAX_S = 10.0


class PgBackend:
    """Everything one process does with the shared queue, started and stopped by the Gateway."""

    def __init__(self, home: Home, settings: Settings, events: EventLog, *, role: str,
                 extra_roots: list[Any], pool: SharedPool | None = None,
                 named_by_message_id: Collection[str] = ()):
        self.home = home
        self.settings = settings
        self.events = events
        self.role = role
        self.dsn = pool.dsn if pool is not None else dsn_from_settings(settings.queue)
        quiet = logging.getLogger("procrastinate")
        if quiet.level == logging.NOTSET and not log.isEnabledFor(logging.DEBUG):
            quiet.setLevel(logging.WARNING)  # a line per job otherwise; our own events say what happened
        try:
            schema.check(self.dsn)
        except schema.SchemaOutdated as exc:
            raise SettingsError(str(exc)) from None
        except Exception as exc:
            raise SettingsError(database_error(exc, self.dsn)) from None
        self.outbox = PgOutbox(home, events, extra_roots=extra_roots, dsn=self.dsn, pool=pool,
                               named_by_message_id=named_by_message_id)
        self.holder = process_instance()
        self.detail: dict[str, Any] = {"database": "connected"}
        self.intake: Intake | None = None
        self.processor: MessageProcessor | None = None
        self._pool: Any = None
        self._sync_pool: Any = None
        self._worker: Any = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()
        self._down_since: str | None = None
        self._sweep_error: str | None = None  # why the last sweep failed, the database not being away
        self._pruned_at: float | None = None  # time.monotonic() of the last prune that reached the database
        self._running_jobs: set[int] = set()  # ids of the jobs this process's task is running now
        self._idle_before: tuple[int | None, set[int]] = (None, set())  # (worker id, its 'doing' jobs not running)

    @property
    def timeout_s(self) -> float:
        """How long a silent worker is taken for alive (`queue.lease_sec`)."""
        return self.settings.queue.lease_sec

    async def start(self, handler: Handler, queue: FileQueue,
                    on_start: Callable[[IncomingPayload], Callable[[], None] | None] | None = None) -> None:
        """Opens the pool and starts taking in, processing, heartbeats and the stalled-job sweep."""
        qs = self.settings.queue
        # autocommit, checked without a round trip (gateway.backends.postgres.pools); a connection broken all the same
        # fails its statement, is discarded by the pool, and what used it is retried (KeepPlace)
        self._pool = message_pool(self.dsn, min_size=2, max_size=qs.max_concurrency + 2, timeout=5)
        await self._pool.open()
        # sync connections for the steps that share a transaction with gateway.backends.postgres.files (run in threads)
        self._sync_pool = sync_message_pool(self.dsn, min_size=1, max_size=3, timeout=5)
        await asyncio.to_thread(self._sync_pool.open)
        self.processor = MessageProcessor(self._pool, handler, self.outbox, self.events, qs, on_start=on_start,
                                          files=(self._sync_pool, self.home, self.settings))
        self.intake = Intake(queue, self._sync_pool, self.events, home=self.home, settings=self.settings,
                             outbox=self.outbox, async_pool=self._pool, on_database=self._database_state)
        await self._register()
        self._tasks = [asyncio.create_task(self.intake.run(), name="pg-intake"),
                       asyncio.create_task(self._run_worker(), name="pg-worker"),
                       asyncio.create_task(self._sweep(), name="pg-sweep")]

    def wake(self) -> None:
        """A file appeared in incoming/."""
        if self.intake is not None:
            self.intake.wake()

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
        """Figures for `queue_stats`."""
        processor = self.processor
        return {"running": processor.running if processor else 0, "processed": processor.processed if processor else 0,
                "taken_in": self.intake.taken if self.intake else 0, "database": self.detail.get("database")}

    # --- processing -------------------------------------------------------------------------

    def _app(self) -> Any:
        import procrastinate

        connector = procrastinate.PsycopgConnector(conninfo=self.dsn, min_size=1, max_size=4,
                                                   pool_factory=procrastinate_pool)
        app = procrastinate.App(connector=connector)
        processor = self.processor
        assert processor is not None

        running = self._running_jobs

        async def message(context: Any, message_id: int, role: str) -> None:
            running.add(context.job.id)
            try:
                await processor.run(message_id, role)
            finally:
                running.discard(context.job.id)

        app.task(name=TASK, queue=QUEUE, retry=KeepPlace(self.settings.queue), pass_context=True)(message)
        return app

    async def _run_worker(self) -> None:
        """Runs Procrastinate's worker; when the database goes away, reconnects with backoff."""
        from procrastinate.worker import Worker

        failures = 0
        while not self._stopping.is_set():
            app = self._app()
            try:
                async with app.open_async():
                    self._worker = Worker(app, queues=[QUEUE], name=self.holder,
                                          concurrency=self.settings.queue.max_concurrency,
                                          install_signal_handlers=False, fetch_job_polling_interval=FETCH_POLL_S,
                                          delete_jobs="successful",  # the message row keeps the outcome
                                          update_heartbeat_interval=self.timeout_s / 4,
                                          stalled_worker_timeout=self.timeout_s)
                    if failures:
                        self._database_state(True, None)
                        failures = 0
                    # a stop() while the app was opening found no worker to stop, and run() forgets a stop
                    # requested before it starts: checked here, with no await until run() has begun
                    if self._stopping.is_set():
                        return
                    await self._worker.run()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self._stopping.is_set():
                    return
                failures += 1
                if database_away(exc):
                    self._database_state(False, f"{type(exc).__name__}: {exc}")
                else:  # not the database going away: said as what it is, and the worker restarted
                    log.error("the worker stopped on an error (restarting it): %s: %s", type(exc).__name__, exc,
                              exc_info=exc)
            finally:
                self._worker = None
            if self._stopping.is_set():
                return
            await wait_event(self._stopping, backoff_delay(max(failures, 1), 0.2, RECONNECT_MAX_S))

    async def _sweep(self) -> None:
        """Retries the jobs of workers that stopped heartbeating, and keeps this process's row fresh."""
        while not await wait_event(self._stopping, self.timeout_s / 3):
            try:
                await self._retry_stalled()
                await self._retry_left_running()
                await self._register()
            except Exception as exc:
                if database_away(exc):
                    self._database_state(False, f"{type(exc).__name__}: {exc}")
                else:  # the database answered (or our code failed): not a reason to call it away
                    self._sweep_failed(exc)
            else:  # the worker's own connections may have come back without its loop failing
                self._sweep_failed(None)
                self._database_state(True, None)

    def _sweep_failed(self, exc: Exception | None) -> None:
        """Logs a sweep failing for another reason than the database being away (once per reason), and
        the sweep working again; tried again at the next sweep either way."""
        reason = f"{type(exc).__name__}: {exc}" if exc is not None else None
        if reason is not None and reason != self._sweep_error:
            log.error("the sweep failed (retried at the next sweep; the database is not away): %s", reason,
                      exc_info=exc)
            self.events.emit("queue.error", reason=f"sweep failed: {reason}")
        elif reason is None and self._sweep_error is not None:
            log.warning("the sweep works again")
        self._sweep_error = reason

    async def _retry_stalled(self) -> None:
        worker = self._worker
        if worker is None:
            return
        manager = worker.app.job_manager
        for job in await manager.get_stalled_jobs(queue=QUEUE, seconds_since_heartbeat=self.timeout_s):
            if not await retry_running(manager, job):
                continue
            what = f"job {job.id} (message {job.task_kwargs.get('message_id')})"
            log.warning("%s was running on a worker that stopped heartbeating: retried it", what)
            self.events.emit("queue.recovered", reason=f"retried {what} of a worker that stopped heartbeating")
        await manager.prune_stalled_workers(self.timeout_s)

    async def _retry_left_running(self) -> None:
        """Retries the jobs the database says this worker runs but it does not: their outcome could not be
        recorded (the database went away between the answer and Procrastinate's bookkeeping, or a fetch's
        reply was lost), and as the worker still heartbeats nobody else would retry them, so their lock
        would hold their conversation until this process stops. A job is retried when two sweeps in a row
        found it so, which leaves alone one being fetched or recorded at that moment; run again, a job
        whose message is already done finds it done (gateway.backends.postgres.processing)."""
        worker = self._worker
        if worker is None or worker.worker_id is None:
            return
        manager = worker.app.job_manager
        doing = await manager.list_jobs_async(queue=QUEUE, status="doing", worker_id=worker.worker_id)
        idle = {job.id: job for job in doing if job.id is not None and job.id not in self._running_jobs}
        before = self._idle_before[1] if self._idle_before[0] == worker.worker_id else set()
        for job_id in sorted(idle.keys() & before):
            job = idle.pop(job_id)
            if not await retry_running(manager, job):
                continue
            what = f"job {job_id} (message {job.task_kwargs.get('message_id')})"
            log.warning("%s was left running on this worker, its outcome not recorded: retried it", what)
            self.events.emit("queue.recovered", reason=f"retried {what} left running, its outcome not recorded")
        self._idle_before = (worker.worker_id, set(idle))

    # --- this process in switchyard_processes ------------------------------------------------

    async def _register(self) -> None:
        """Records this process in switchyard_processes (its `detail` made storable: a reason may quote a NUL)."""
        host = socket.gethostname()
        async with self._pool.connection() as conn:
            await conn.execute(
                "INSERT INTO switchyard_processes (holder, role, host, pid, detail) VALUES (%s, %s, %s, %s, %s::jsonb) "
                "ON CONFLICT (holder) DO UPDATE SET last_seen = now(), detail = EXCLUDED.detail",
                (self.holder, self.role, host, os.getpid(), safe_json(self.detail).decode()))

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

    async def stop(self, grace_s: float) -> None:
        """Stops taking in, lets running jobs finish for `grace_s` (the rest are retried by someone)."""
        self._stopping.set()
        if self.intake is not None:
            self.intake.stop()
        worker = self._worker
        if worker is not None:
            worker.shutdown_graceful_timeout = grace_s
            worker.stop()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=grace_s + 5)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._pool is not None:
            try:
                async with self._pool.connection(timeout=2) as conn:
                    await conn.execute("DELETE FROM switchyard_processes WHERE holder = %s", (self.holder,))
            except Exception as exc:
                log.warning("could not remove this process from switchyard_processes: %s", exc)
            await self._pool.close()
        if self._sync_pool is not None:
            await asyncio.to_thread(self._sync_pool.close)

