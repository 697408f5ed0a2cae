"""`switchyard_outbox` as the postgres delivery keeps it (gateway/backends/postgres/dispatcher.py drives it).

The head of each conversation is its oldest pending row; a retried row waits out its delay in
`next_attempt_at`. Every write of a row is fenced by the lease of its channel profile
(gateway/backends/postgres/leases.py HELD_BY): a process that lost the lease changes nothing (LeaseLost),
and while the database is away the write is retried as long as the lease is still held here. The parts of
a multi-part reply sent so far are the row's own journal (RowJournal, gateway/backends/postgres/journal.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from gateway.api import Channel
from gateway.backends.postgres.journal import PART_SENT, sent_parts_of
from gateway.backends.postgres.leases import HELD_BY, Leases
from gateway.channelkit.backoff import delay as backoff_delay
from gateway.models import OutgoingPayload
from gateway.storable import made_safe
from gateway.telemetry.events import EventLog

HEADS = """
SELECT DISTINCT ON (channel, profile, conversation) channel, profile, conversation,
       GREATEST(0, extract(epoch FROM next_attempt_at - now()))::float8
FROM switchyard_outbox
WHERE state = 'pending' AND (channel, profile) IN (SELECT * FROM unnest(%s::text[], %s::text[]))
ORDER BY channel, profile, conversation, id
"""
HEAD = """
SELECT id, name, payload, attempts, parts_sent, next_attempt_at <= now()
FROM switchyard_outbox WHERE state = 'pending' AND channel = %s AND profile = %s AND conversation = %s
ORDER BY id LIMIT 1
"""
SUPERSEDED = ("SELECT EXISTS (SELECT 1 FROM switchyard_outbox head JOIN switchyard_outbox later USING (channel, "
              "profile, conversation) WHERE head.id = %s AND later.state = 'pending' AND later.id > head.id "
              "AND %s IN (later.payload->>'progressKey', later.payload->>'streamKey'))")
FENCED = " WHERE id = %s AND state = 'pending' AND " + HELD_BY
Key = tuple[str, str, str]  # (channel type, profile, conversation) as the row has them


class LeaseLost(Exception):
    """This process no longer owns the row's channel profile: it must not touch the row again."""


class OutboxRows:
    """The outbox rows of the channel profiles this process owns, on a pool of its own (opened by `open`):
    the heads, and the fenced writes of a row (`update`, `dead`). `on_database_error` hears every
    failure to reach the database (the delivery says once that it is away)."""

    def __init__(self, dsn: str, leases: Leases, events: EventLog,
                 on_database_error: Callable[[BaseException], None]):
        self.dsn = dsn
        self.leases = leases
        self.events = events
        self.on_database_error = on_database_error
        self.pool: Any = None  # a psycopg_pool.AsyncConnectionPool, once open
        self.write_retries = 0  # fenced row writes retried because the database was away

    def open(self) -> None:
        """Makes the pool (its connections are made when first needed)."""
        from psycopg_pool import AsyncConnectionPool

        from gateway.backends.postgres.pools import check_if_signalled

        # checked without a round trip unless the server sent the idle connection something (a restart)
        self.pool = AsyncConnectionPool(self.dsn, min_size=1, max_size=4, open=False, kwargs={"autocommit": True},
                                        check=check_if_signalled)

    async def close(self) -> None:
        if self.pool is not None:
            with suppress(Exception):
                await asyncio.wait_for(self.pool.close(), 5.0)

    async def heads(self, pairs: Sequence[tuple[str, str]]) -> list[tuple[str, str, str, float]]:
        """(channel, profile, conversation, seconds until due) of each conversation's head, for the owned
        (channel, profile) `pairs`."""
        await self.pool.open(wait=False)
        async with self.pool.connection(timeout=5.0) as conn:
            cursor = await conn.execute(HEADS, ([p[0] for p in pairs], [p[1] for p in pairs]))
            return list(await cursor.fetchall())

    async def head(self, key: Key) -> tuple[Any, ...] | None:
        """(id, name, payload, attempts, parts_sent, due) of the conversation's oldest pending row."""
        async with self.pool.connection(timeout=5.0) as conn:
            row: tuple[Any, ...] | None = await (await conn.execute(HEAD, key)).fetchone()
        return row

    async def superseded(self, row_id: int, progress_key: str) -> bool:
        async with self.pool.connection(timeout=5.0) as conn:
            row = await (await conn.execute(SUPERSEDED, (row_id, progress_key))).fetchone()
        return bool(row and row[0])

    async def dead(self, row_id: int, lease: str, reason: str, attempts: int) -> None:
        reason = made_safe(reason)  # a platform's error may quote what no column holds
        await self.update(row_id, lease, "state = 'dead', reason = %s, last_error = %s, attempts = %s",
                          (reason, reason, attempts))

    async def update(self, row_id: int, lease: str, assignments: str, params: tuple[Any, ...]) -> None:
        """`UPDATE switchyard_outbox SET <assignments>` of one pending row, fenced by `lease`, retried while
        the database is away and the lease still held; LeaseLost when the lease is gone (then the next
        owner decides)."""
        sql = f"UPDATE switchyard_outbox SET {assignments}{FENCED}"
        params = (*params, row_id, lease, self.leases.holder)
        failures = 0
        while True:
            if not self.leases.holds(lease):
                raise LeaseLost(f"the lease {lease} is no longer held here")
            try:
                async with self.pool.connection(timeout=2.0) as conn:
                    cursor = await conn.execute(sql, params)
                    changed = cursor.rowcount
            except Exception as exc:
                failures += 1
                self.write_retries += 1
                self.on_database_error(exc)
                await asyncio.sleep(backoff_delay(failures, 0.1, 2.0))
                continue
            if changed == 0:
                raise LeaseLost(f"the lease {lease} is held by another process (or the row changed)")
            return


@dataclass
class RowHead:
    """An outbox row at the head of its conversation (a gateway.runtime.sending.Head); every write is
    fenced by the lease."""

    rows: OutboxRows
    row_id: int
    lease: str
    name: str
    payload: OutgoingPayload
    channel: Channel
    attempts: int
    journal: RowJournal

    def counts(self, exc: Exception) -> bool:
        return not isinstance(exc, LeaseLost) and not self.journal.database_failed

    async def sent(self) -> None:
        await self.rows.update(self.row_id, self.lease,
                               "state = 'sent', sent_at = now(), parts_sent = '{}', last_error = NULL", ())

    async def superseded(self) -> bool:
        key = self.payload.progress_key
        return key is not None and await self.rows.superseded(self.row_id, key)

    async def retry(self, attempts: int, error: str, delay_s: float) -> None:
        error = made_safe(self.rows.events.redact(error))  # may quote a NUL or a lone surrogate: U+FFFD
        await self.rows.update(self.row_id, self.lease, "attempts = %s, last_error = %s, "
                               "next_attempt_at = now() + make_interval(secs => %s)", (attempts, error, delay_s))

    async def dead(self, reason: str, attempts: int) -> None:
        await self.rows.dead(self.row_id, self.lease, reason, attempts)


class RowJournal:
    """The delivery journal of one outbox row whose lease this process holds (a SharedJournal): its
    `parts_sent` as read with the head, each part written fenced by the lease; `database_failed` once a
    write found the lease gone (the failure is then not the platform's)."""

    def __init__(self, rows: OutboxRows, row_id: int, lease: str, parts_sent: dict[str, Any] | None):
        self.rows = rows
        self.row_id = row_id
        self.lease = lease
        self.sent = sent_parts_of(parts_sent)
        self.database_failed = False

    async def sent_parts(self) -> dict[int, str]:
        return dict(self.sent)

    async def record(self, index: int, platform_id: str) -> None:
        try:
            await self.rows.update(self.row_id, self.lease, PART_SENT, (str(index), platform_id))
        except LeaseLost:
            self.database_failed = True
            raise
        self.sent[index] = platform_id
