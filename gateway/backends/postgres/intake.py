"""Taking in: each file of `queue/incoming/` becomes a `switchyard_messages` row, then is removed.

Channels keep writing into incoming/ (a local, durable spool that works while the database is
down); files are taken in one at a time in claim order (gateway.spool.order.order_of), each in one
transaction, and unlinked only after it committed. A crash in between leaves the
file claimed; the next start returns it to incoming/ and takes it in again: the same name with the
same bytes is only unlinked, the same name with other bytes is stored under a new name. Files that
must never be read (a FIFO, a link, an oversized one) are quarantined to failed/ here, as the file
backend does, and so is one the database refuses (only a lost connection means the database is away:
gateway.backends.postgres.errors); an unparsable payload is stored, keyless, and dead-lettered by the Worker with
its reason.
A message's attachments under the home's files/ are stored with it (gateway.backends.postgres.files), for a worker
on another host; one too large to carry is stored dead, and its sender told why.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import PurePath
from typing import Any

from gateway.aio import wait_event
from gateway.backends.postgres.edits import PgEdits
from gateway.backends.postgres.errors import database_away, worth_waiting
from gateway.backends.postgres.outbox import PgOutbox
from gateway.channelkit.backoff import delay as backoff_delay
from gateway.channelkit.edits import to_queue
from gateway.home import Home
from gateway.models import INVALID_APOLOGY, IncomingPayload, OutgoingPayload
from gateway.payloads import message_identity, ordering_keys, parse_payload
from gateway.settings import Settings
from gateway.spool.queue import CLAIM_RETRY_S, Claimed, FileQueue
from gateway.storable import made_safe
from gateway.telemetry.events import EventLog, now_ms

log = logging.getLogger("switchyard.pg.intake")

INSERT = ("INSERT INTO switchyard_messages (name, payload, channel, profile, conversation, keys, identity) "
          "VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (name) DO NOTHING RETURNING id")


class Intake:
    """Moves incoming/ into the database, oldest first; pauses with backoff while the database is away.

    A message without attachments is one statement on the async pool. One with
    attachments is one transaction on a sync connection in a thread (the row, its attachments by
    gateway.backends.postgres.files.store), so the event loop never waits on reading the files.
    """

    def __init__(self, queue: FileQueue, pool: Any, events: EventLog, *, home: Home, settings: Settings,
                 outbox: PgOutbox, async_pool: Any, on_database: Any = None, on_taken: Any = None):
        self.queue = queue
        self.pool = pool  # a psycopg_pool.ConnectionPool (sync)
        self.async_pool = async_pool  # an AsyncConnectionPool in autocommit (postgres/pools.py)
        self.events = events
        self.home = home
        self.settings = settings
        self.outbox = outbox
        self.edits = PgEdits(pool)
        self.on_database = on_database  # called with (ok: bool, reason: str | None)
        self.on_taken = on_taken  # called when a message was stored (the worker looks)
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
            except Exception as exc:
                if not worth_waiting(exc):  # refused: that file's failure, never the queue's
                    await self._refused(claimed, exc)
                    continue
                self.queue.release(claimed, 0.0)  # the database is away: back in line, nothing skipped
                failures += 1
                if failures == 1:
                    log.error("cannot take %s into the database (retrying with backoff): %s", claimed.name, exc)
                    self.events.emit("queue.error", job_id=claimed.name,
                                     reason=f"cannot take in: {type(exc).__name__}: {exc}")
                if self.on_database is not None and database_away(exc):
                    self.on_database(False, f"{type(exc).__name__}: {exc}")
                if await wait_event(self._stopping, backoff_delay(failures, 0.2, 5.0)):
                    return
                continue
            if failures:
                failures = 0
                if self.on_database is not None:
                    self.on_database(True, None)

    async def _refused(self, claimed: Claimed, exc: Exception) -> None:
        """A file the database refused (text it cannot hold, a name it cannot encode...) goes to this host's
        failed/ with its bytes and why, as a file that must never be read does; its sender is told when
        it parses. The files behind it go on."""
        reason = made_safe(f"cannot be stored in the database: {type(exc).__name__}: {exc}".strip())
        try:
            target = self.queue.dead_letter(claimed, reason)
        except OSError as error:  # failed/ refuses it too: back in line, tried again shortly
            self.events.emit("queue.error", job_id=claimed.name, reason=f"cannot quarantine a refused file: {error}")
            with contextlib.suppress(OSError):
                self.queue.release(claimed, CLAIM_RETRY_S)
            return
        log.error("dead letter: %s moved to failed/%s: %s", claimed.name, target.name, reason)
        self.events.emit("job.failed.final", job_id=target.name, state="failed_final", kind="message",
                         reason=reason, failure_reason=reason, attempts=0, file=target.name)
        try:
            message = parse_payload(claimed.data, self.queue.max_payload_bytes)
            apology = OutgoingPayload.reply_to(message, INVALID_APOLOGY.format(reason=reason),
                                               agent="switchyard", timestamp=now_ms(), quoted=[reason])
            await asyncio.to_thread(self.outbox.write, apology)
        except Exception as error:  # the dead letter holds the reason; the sender is not told this time
            log.warning("no apology for %s: %s", target.name, error)

    async def take_in(self, claimed: Claimed) -> None:
        """Stores one claimed file (or quarantines it), then removes it from the spool."""
        limit = self.queue.max_payload_bytes
        if claimed.invalid is not None or len(claimed.data) > limit:
            reason = claimed.invalid or f"payload larger than queue.max_payload_bytes ({limit} bytes)"
            target = self.queue.dead_letter(claimed, reason)
            log.error("invalid payload %s moved to failed/%s: %s", claimed.name, target.name, reason)
            self.events.emit("message.invalid", job_id=claimed.name, reason=reason, file=target.name)
            return
        try:
            message: IncomingPayload | None = parse_payload(claimed.data, limit)
        except ValueError:  # stored keyless: the worker dead-letters it with its reason
            message = None
        data = claimed.data
        if message is not None and message.editOf:
            queued = await asyncio.to_thread(to_queue, self.edits.fold_edit, message)
            if queued is None:
                self.queue.complete(claimed)  # folded into its waiting original (gateway.backends.postgres.edits)
                self.taken += 1
                return
            if queued is not message:  # another sender's edit: a message of its own
                message, data = queued, queued.to_json()
        if await self._store_plain(claimed.name, data, message):
            refused = None
        else:
            refused = await asyncio.to_thread(self._store, claimed.name, data, message)
        self.queue.complete(claimed)
        self.taken += 1
        if self.on_taken is not None:
            self.on_taken()
        if refused is not None and message is not None:
            log.error("dead letter: %s: %s", claimed.name, refused)
            self.events.emit("job.failed.final", job_id=claimed.name, state="failed_final", kind="message",
                             channel=message.channel, conversation=message.conversation, reason=refused,
                             failure_reason=refused, attempts=0)

    async def _store_plain(self, name: str, data: bytes, message: IncomingPayload | None) -> bool:
        """A message without attachments, stored in one statement on the event loop (the
        async pool is in autocommit: one transaction, one round trip, no thread). False when it has
        attachments, or its name was stored before (the same bytes after a crash before the unlink, or
        another file under a taken name): `_store` then does what each case needs."""
        if message is not None and message.file_paths():
            return False
        _, fields = _fields(message)
        async with self.async_pool.connection() as conn:
            cursor = await conn.execute(INSERT, [name, data, *fields])
            return await cursor.fetchone() is not None

    def _store(self, name: str, data: bytes, message: IncomingPayload | None) -> str | None:
        """One transaction: the row and its attachments. Returns why it was refused (an attachment
        too large to carry: stored dead, with the sender told), else None."""
        from gateway.backends.postgres import files

        _, fields = _fields(message)
        with self.pool.connection() as conn, conn.transaction(), conn.cursor() as cursor:
            message_id = _insert(cursor, name, data, fields)
            if message_id is None:
                return None
            if message is not None and message.file_paths():
                try:
                    with conn.transaction():  # a savepoint: a refused message keeps none of its files
                        files.store(conn, name, message, self.home, settings=self.settings)
                except files.AttachmentTooLarge as exc:
                    reason = str(exc)
                    cursor.execute("UPDATE switchyard_messages SET state = 'dead', reason = %s WHERE id = %s",
                                   (reason, message_id))
                    apology = self.outbox.prepared(OutgoingPayload.reply_to(
                        message, f"Sorry, I could not take in your message: {reason}", agent="switchyard",
                        timestamp=now_ms()))
                    self.outbox.insert_sync(cursor, apology)
                    return reason
        return None


def _fields(message: IncomingPayload | None) -> tuple[list[str], list[Any]]:
    """(ordering keys, the row's channel, profile, conversation, keys and identity); keyless for an
    unparsable one."""
    if message is None:
        return [], ["", "", "", [], None]
    keys = list(ordering_keys(message))
    return keys, [message.channel, message.profile, message.conversation, keys, message_identity(message)]


def _insert(cursor: Any, name: str, data: bytes, fields: list[Any]) -> int | None:
    """The new row's id; None when this very file was stored before (a crash before its unlink)."""
    path = PurePath(name)
    candidate = name
    for again in range(1, 1000):
        row = cursor.execute(INSERT, (candidate, data, *fields)).fetchone()
        if row is not None:
            return int(row[0])
        stored = cursor.execute("SELECT payload FROM switchyard_messages WHERE name = %s", (candidate,)).fetchone()
        if stored is not None and bytes(stored[0]) == data:
            return None
        candidate = f"{path.stem}.again-{again}{path.suffix}"
    raise RuntimeError(f"{name}: a thousand messages were already stored under this name")
