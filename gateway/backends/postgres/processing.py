"""The Procrastinate task that runs one stored message: the postgres backend's counterpart of gateway/runtime/worker.py.

Each job is one role of one message (gateway.backends.postgres.keyjobs): `process` answers it, `gate` holds its
conversation while its run key's `process` job waits. Every outcome is written in one transaction
with the message row (replies into `switchyard_outbox`, the answer, the state), so a job run twice
(after a worker died, or the database went away mid-job) answers once: the second run finds it done.
A failure reschedules the same job (`Reschedule`), which keeps its place under its lock.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from procrastinate.jobs import Job
from procrastinate.retry import BaseRetryStrategy, RetryDecision
from psycopg.errors import UniqueViolation

from gateway.api import Handler
from gateway.backends.postgres import answered
from gateway.backends.postgres.errors import worth_waiting
from gateway.backends.postgres.keyjobs import job_locks
from gateway.backends.postgres.outbox import PgOutbox
from gateway.models import IncomingPayload, OutgoingPayload, UnstorableText
from gateway.payloads import backoff_seconds, message_identity, parse_payload
from gateway.runtime.outcome import Dead, Done, Retry, dead, handled
from gateway.settings import QueueSettings
from gateway.storable import made_safe
from gateway.telemetry import tracing
from gateway.telemetry.events import EventLog

log = logging.getLogger("switchyard.pg.worker")

PARK_S = 0.2  # how soon a parked job (a gate, or a process job waiting for its gate) looks again
KEPT_ERRORS = 20
# Whether the message was answered within the window; if not, it is marked running, in the same statement,
# which returns the payload as it was then (an edit folded into it while it waited: gateway/backends/postgres/edits.py).
ANSWERED_OR_START = (
    "WITH seen AS (SELECT 1 FROM switchyard_answered WHERE %(window)s > 0 AND identity = %(identity)s "
    f"AND {answered.IN_WINDOW}), "
    "started AS (UPDATE switchyard_messages SET state = 'running', updated_at = now() "
    "WHERE id = %(id)s AND state = 'queued' AND NOT EXISTS (SELECT 1 FROM seen) RETURNING payload) "
    "SELECT EXISTS (SELECT 1 FROM seen), (SELECT payload FROM started)")

# The message's row and, when it can be started in the same statement (its identity was stored when it was
# taken in, and it waits for no gate: one key, or its gate open), ANSWERED_OR_START's check and start: one
# round trip where two were. `folded` says whether that part ran (else the worker runs ANSWERED_OR_START).
READ_AND_START = (
    "WITH m AS (SELECT name, payload, state, attempts, errors, keys, gate_open, identity, "
    "identity IS NOT NULL AND (gate_open OR cardinality(keys) <= 1) AS folded "
    "FROM switchyard_messages WHERE id = %(id)s), "
    "seen AS (SELECT 1 FROM switchyard_answered WHERE %(window)s > 0 "
    "AND identity = (SELECT identity FROM m WHERE folded) "
    f"AND {answered.IN_WINDOW}), "
    "started AS (UPDATE switchyard_messages SET state = 'running', updated_at = now() "
    "WHERE id = %(id)s AND state = 'queued' AND (SELECT folded FROM m) AND NOT EXISTS (SELECT 1 FROM seen) "
    "RETURNING payload) "
    "SELECT name, payload, state, attempts, errors, keys, gate_open, folded, EXISTS (SELECT 1 FROM seen), "
    "(SELECT payload FROM started) FROM m")

REFUSED = ("UPDATE switchyard_messages SET state = 'dead', reason = %s, updated_at = now() "
           "WHERE id = %s AND state NOT IN ('done', 'dead') RETURNING name, channel, conversation")


class Reschedule(Exception):
    """Runs this job again after `delay_s`: the same job, so it keeps its place under its lock."""

    def __init__(self, delay_s: float, why: str):
        super().__init__(why)
        self.delay_s = delay_s


class KeepPlace(BaseRetryStrategy):
    """Every failed job is retried, never dropped: after its own delay when it asked (`Reschedule`),
    else (our bookkeeping failed: the database went away, a shutdown cancelled it) with backoff,
    not counted as an attempt of the message. A job whose bookkeeping the database refused never gets
    here: `MessageProcessor.run` makes it its message's failure (dead, with the reason)."""

    def __init__(self, settings: QueueSettings):
        self.settings = settings

    def get_retry_decision(self, *, exception: BaseException, job: Job) -> RetryDecision | None:
        if isinstance(exception, Reschedule):
            delay = exception.delay_s
        else:
            delay = backoff_seconds(min(job.attempts + 1, 30), self.settings)
        return RetryDecision(retry_at=datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=delay))


class MessageProcessor:
    """Runs the jobs of stored messages through the handler."""

    def __init__(self, pool: Any, handler: Handler, outbox: PgOutbox, events: EventLog, settings: QueueSettings,
                 *, on_start: Callable[[IncomingPayload], Callable[[], None] | None] | None = None,
                 files: tuple[Any, Any, Any] | None = None):
        self.pool = pool  # a psycopg_pool.AsyncConnectionPool
        self.handler = handler
        self.outbox = outbox
        self.events = events
        self.settings = settings
        self.on_start = on_start
        self.files = files  # (sync pool, home, settings): where stored attachments are written back
        self.processed = 0
        self.running = 0

    async def run(self, message_id: int, role: str) -> None:
        """The Procrastinate task body (gateway.backends.postgres.keyjobs.TASK). A failure of its own bookkeeping
        that is not
        worth waiting out (gateway.backends.postgres.errors: the database refused what the message made us write) is
        that
        message's failure: it is dead with the reason, never retried forever holding its keys."""
        try:
            if role == "gate":
                await self._gate(message_id)
            else:
                await self._process(message_id)
        except Reschedule:
            raise
        except Exception as exc:
            if worth_waiting(exc):
                raise
            await self._refused(message_id, exc)

    async def _refused(self, message_id: int, exc: Exception) -> None:
        """Marks the message dead (its bytes stay in its row) because the database refused its bookkeeping."""
        reason = made_safe(f"the database refused its bookkeeping: {type(exc).__name__}: {exc}".strip())
        log.error("message %s dead-lettered: %s", message_id, reason, exc_info=True)
        async with self.pool.connection() as conn:
            cursor = await conn.execute(REFUSED, (reason, message_id))
            row = await cursor.fetchone()
        if row is not None:
            self.events.emit("job.failed.final", job_id=row[0], state="failed_final", kind="message", channel=row[1],
                             conversation=row[2], reason=reason, failure_reason=reason)

    async def _gate(self, message_id: int) -> None:
        """Holds the conversation of a two-key message until it is done or dead (parks meanwhile)."""
        async with self.pool.connection() as conn:
            cursor = await conn.execute("UPDATE switchyard_messages SET gate_open = true WHERE id = %s "
                                        "RETURNING state", (message_id,))
            row = await cursor.fetchone()
        if row is None or row[0] in ("done", "dead"):
            return
        raise Reschedule(PARK_S, "holding the conversation")

    async def _process(self, message_id: int) -> None:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(READ_AND_START, {"id": message_id,
                                                         "window": float(self.settings.duplicate_window_sec)})
            row = await cursor.fetchone()
        if row is None or row[2] in ("done", "dead"):
            return  # run again after its outcome was stored: nothing left to do
        name, payload, _, attempts, errors, keys, gate_open, folded, seen, started = row
        try:
            message = parse_payload(bytes(payload), self.settings.max_payload_bytes)
        except ValueError as exc:
            apology = exc.apology() if isinstance(exc, UnstorableText) else None
            await self._store_dead(message_id, str(exc), attempts, [*errors, str(exc)], apology)
            log.error("invalid payload %s dead-lettered: %s", name, exc)
            self.events.emit("message.invalid", job_id=name, reason=str(exc))
            return
        if len(job_locks(keys)) > 1 and not gate_open:
            raise Reschedule(PARK_S, "waiting for its conversation")
        if not folded:  # stored without its identity (before it was kept), or a gate to wait for first
            seen, started = await self._answered_or_start(message_id, message)
        if started is not None and bytes(started) != bytes(payload):  # edited after it was read: run the edit
            message = parse_payload(bytes(started), self.settings.max_payload_bytes)
        if seen:
            await self._store_done(message_id, message, [], duplicate=True)
            self.events.emit("message.duplicate", job_id=name, channel=message.channel,
                             conversation=message.conversation, messageId=message.messageId)
            return
        self.events.emit("message.claimed", job_id=name, channel=message.channel, profile=message.profile,
                         conversation=message.conversation, attempt=attempts + 1)
        tracing.claimed(message, attempt=attempts + 1, job=name)
        if self.files is not None and message.file_paths():
            from gateway.backends.postgres.files import FileConflict

            try:
                message = await asyncio.to_thread(self._materialize, name, message)
            except FileConflict as exc:
                await self._dead_letter(message_id, name, message, dead(message, f"attachment: {exc}", attempts + 1),
                                        list(errors))
                return
        await self._answer(message_id, name, message, attempts, list(errors))

    def _materialize(self, name: str, message: IncomingPayload) -> IncomingPayload:
        """The message naming its attachments as written back under this host's home (postgres/files.py)."""
        from gateway.backends.postgres.files import materialize

        assert self.files is not None
        pool, home, settings = self.files
        with pool.connection() as conn:
            return materialize(conn, name, message, home, settings=settings)

    async def _answer(self, message_id: int, name: str, message: IncomingPayload, attempts: int,
                      errors: list[str]) -> None:
        started = time.monotonic()
        finished = self.on_start(message) if self.on_start is not None else None
        self.running += 1
        try:
            outcome = await handled(self.handler, message, attempts, self.settings, job_id=name)
        finally:
            self.running -= 1
            if finished is not None:
                finished()
        if isinstance(outcome, Done):
            if await self._store_done(message_id, message, outcome.replies):
                self.processed += 1
                outcome.announce(self.events, name, message, time.monotonic() - started)
        elif isinstance(outcome, Retry):
            await self._requeue(message_id, name, message, outcome, errors)
        else:
            await self._dead_letter(message_id, name, message, outcome, errors)

    async def _answered_or_start(self, message_id: int, message: IncomingPayload) -> tuple[bool, Any]:
        """(True, None) when the message was answered within the duplicate window; else marks it running
        and gives its payload as started (one statement: the pool is in autocommit)."""
        async with self.pool.connection() as conn:
            cursor = await conn.execute(ANSWERED_OR_START, {"identity": message_identity(message), "id": message_id,
                                                            "window": float(self.settings.duplicate_window_sec)})
            row = await cursor.fetchone()
        return (bool(row[0]), row[1]) if row else (False, None)

    async def _store_done(self, message_id: int, message: IncomingPayload, replies: list[OutgoingPayload],
                          *, duplicate: bool = False) -> bool:
        """Replies, the answer and `done` in one transaction; False when another run stored it first.

        One statement when it can be (gateway.backends.postgres.outbox.store_done_statement); when a reply's name is
        taken, or the channel's replies replace earlier ones, the transaction below that names each."""
        checked = [self.outbox.prepared(reply) for reply in replies]
        identity = None if duplicate else message_identity(message)
        statement = self.outbox.store_done_statement(message_id, identity, checked)
        if statement is not None:
            try:
                async with self.pool.connection() as conn:
                    cursor = await conn.execute(*statement)
                    row = await cursor.fetchone()
                return bool(row and row[0])
            except UniqueViolation:
                pass  # a reply's name was taken (another host, same millisecond): nothing was stored
        async with self.pool.connection() as conn, conn.transaction(), conn.cursor() as cursor:
            await cursor.execute("SELECT state FROM switchyard_messages WHERE id = %s FOR UPDATE", (message_id,))
            row = await cursor.fetchone()
            if row is None or row[0] in ("done", "dead"):
                return False
            for reply in checked:
                await self.outbox.insert(cursor, reply)
            if identity is not None:
                await cursor.execute(answered.RECORD, (identity,))
            await cursor.execute("UPDATE switchyard_messages SET state = 'done', updated_at = now() WHERE id = %s",
                                 (message_id,))
        return True

    async def _store_dead(self, message_id: int, reason: str, attempts: int, errors: list[str],
                          apology: OutgoingPayload | None) -> bool:
        """`dead` with its reason (the original bytes stay in the row), and the apology, in one transaction."""
        checked = self.outbox.prepared(apology) if apology is not None else None
        reason, errors = made_safe(reason), made_safe(errors)  # an error's text may quote what no store holds
        async with self.pool.connection() as conn, conn.transaction(), conn.cursor() as cursor:
            await cursor.execute("SELECT state FROM switchyard_messages WHERE id = %s FOR UPDATE", (message_id,))
            row = await cursor.fetchone()
            if row is None or row[0] in ("done", "dead"):
                return False
            await cursor.execute("UPDATE switchyard_messages SET state = 'dead', reason = %s, attempts = %s, "
                                 "errors = %s::jsonb, updated_at = now() WHERE id = %s",
                                 (reason, attempts, json.dumps(errors[-KEPT_ERRORS:]), message_id))
            if checked is not None:
                await self.outbox.insert(cursor, checked)
        return True

    async def _requeue(self, message_id: int, name: str, message: IncomingPayload, retry: Retry,
                       errors: list[str]) -> None:
        """Counts the attempt and its error on the row, then runs this job again after the backoff."""
        retry.announce(self.events, name, message)
        errors = made_safe([*errors, retry.error])  # an error's text may quote what no store holds (a NUL)
        async with self.pool.connection() as conn:
            await conn.execute("UPDATE switchyard_messages SET state = 'queued', attempts = %s, errors = %s::jsonb, "
                               "updated_at = now() WHERE id = %s AND state = 'running'",
                               (retry.attempts, json.dumps(errors[-KEPT_ERRORS:]), message_id))
        retry.requeued(self.events, name, message)
        raise Reschedule(retry.delay_s, retry.error)

    async def _dead_letter(self, message_id: int, name: str, message: IncomingPayload, given_up: Dead,
                           errors: list[str]) -> None:
        if await self._store_dead(message_id, given_up.reason, given_up.attempts, [*errors, given_up.error],
                                  given_up.apology):
            given_up.announce(self.events, name, message)
