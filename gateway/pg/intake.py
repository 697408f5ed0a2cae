"""Taking in: each file of `queue/incoming/` becomes a `switchyard_messages` row and its jobs, then is removed.

Channels keep writing into incoming/ (a local, durable spool that works while the database is
down); files are taken in one at a time in claim order (gateway.queue.order_of), each in one
transaction with its jobs, and unlinked only after it committed. A crash in between leaves the
file claimed; the next start returns it to incoming/ and takes it in again: the same name with the
same bytes is only unlinked, the same name with other bytes is stored under a new name. Files that
must never be read (a FIFO, a link, an oversized one) are quarantined to failed/ here, as the file
backend does; an unparsable payload is stored, keyless, and dead-lettered by the worker with its reason.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import PurePath
from typing import Any

from gateway.aio import wait_event
from gateway.backoff import delay as backoff_delay
from gateway.events import EventLog
from gateway.keys import ordering_keys
from gateway.pg.jobs import defer_query
from gateway.queue import Claimed, FileQueue
from gateway.worker import parse_payload

log = logging.getLogger("switchyard.pg.intake")

INSERT = ("INSERT INTO switchyard_messages (name, payload, channel, profile, conversation, keys) "
          "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (name) DO NOTHING RETURNING id")


class Intake:
    """Moves incoming/ into the database, oldest first; pauses with backoff while the database is away."""

    def __init__(self, queue: FileQueue, pool: Any, events: EventLog, *,
                 on_database: Any = None):
        self.queue = queue
        self.pool = pool  # a psycopg_pool.AsyncConnectionPool
        self.events = events
        self.on_database = on_database  # called with (ok: bool, reason: str | None)
        self.taken = 0
        self._wakeup = asyncio.Event()
        self._stopping = asyncio.Event()

    def wake(self) -> None:
        """A file appeared in incoming/ (or a rescan found some)."""
        self._wakeup.set()

    def stop(self) -> None:
        self._stopping.set()
        self._wakeup.set()

    async def run(self) -> None:
        """Takes files in until `stop()`."""
        failures = 0
        while not self._stopping.is_set():
            self._wakeup.clear()
            claimed = self.queue.claim()
            if claimed is None:
                await wait_event(self._wakeup, self.queue.next_due_in())
                continue
            try:
                await self.take_in(claimed)
            except Exception as exc:  # the database is away (or refused it): back in line, nothing skipped
                self.queue.release(claimed, 0.0)
                failures += 1
                if failures == 1:
                    log.error("cannot take %s into the database (retrying with backoff): %s", claimed.name, exc)
                    self.events.emit("queue.error", job_id=claimed.name,
                                     reason=f"cannot take in: {type(exc).__name__}: {exc}")
                if self.on_database is not None:
                    self.on_database(False, f"{type(exc).__name__}: {exc}")
                if await wait_event(self._stopping, backoff_delay(failures, 0.2, 5.0)):
                    return
                continue
            if failures:
                failures = 0
                if self.on_database is not None:
                    self.on_database(True, None)

    async def take_in(self, claimed: Claimed) -> None:
        """Stores one claimed file with its jobs (or quarantines it), then removes it from the spool."""
        limit = self.queue.max_payload_bytes
        if claimed.invalid is not None or len(claimed.data) > limit:
            reason = claimed.invalid or f"payload larger than queue.max_payload_bytes ({limit} bytes)"
            target = self.queue.dead_letter(claimed, reason)
            log.error("invalid payload %s moved to failed/%s: %s", claimed.name, target.name, reason)
            self.events.emit("message.invalid", job_id=claimed.name, reason=reason, file=target.name)
            return
        data = claimed.data
        try:
            message = parse_payload(data, limit)
            keys = list(ordering_keys(message))
            fields = [message.channel, message.profile, message.conversation, keys]
        except ValueError:  # stored keyless: the worker dead-letters it with its reason
            keys, fields = [], ["", "", "", []]
        async with self.pool.connection() as conn, conn.transaction(), conn.cursor() as cursor:
            message_id = await _insert(cursor, claimed.name, data, fields)
            if message_id is not None:
                await cursor.execute(*defer_query(message_id, keys))
        self.queue.complete(claimed)
        self.taken += 1


async def _insert(cursor: Any, name: str, data: bytes, fields: list[Any]) -> int | None:
    """The new row's id; None when this very file was stored before (a crash before its unlink)."""
    path = PurePath(name)
    candidate = name
    for again in range(1, 1000):
        await cursor.execute(INSERT, (candidate, data, *fields))
        row = await cursor.fetchone()
        if row is not None:
            return int(row[0])
        await cursor.execute("SELECT payload FROM switchyard_messages WHERE name = %s", (candidate,))
        stored = await cursor.fetchone()
        if stored is not None and bytes(stored[0]) == data:
            return None
        candidate = f"{path.stem}.again-{again}{path.suffix}"
    raise RuntimeError(f"{name}: a thousand messages were already stored under this name")
