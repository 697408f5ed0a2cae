"""Delivers `switchyard_outbox` rows through the channels this process owns (the postgres backend's Dispatcher).

The rules (head of conversation first, retries, dead replies, events) are gateway/runtime/sending.py's; this
module keeps them in rows. Only the current owner of a channel profile (its lease, gateway/backends/postgres/leases.py)
delivers that profile's rows, the head of each conversation being its oldest pending row; a retried
row waits out its delay in `next_attempt_at`. Each part of a multi-part reply is recorded on its row
as it is sent (`parts_sent`, migration 0020, through gateway.channelkit.delivery.SHARED_JOURNAL), so a restart or
a takeover continues after it. Every write is fenced by the lease: a process that lost it changes nothing.

Wake-ups come from LISTEN switchyard_outbox, with a poll as fallback; both reconnect with backoff
after the database goes away. Replies still written as files into `queue/outgoing/` (the spec-002
folder, or a FileOutbox) are taken into the table and removed.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Collection, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from gateway.api import Channel
from gateway.backends.postgres.errors import database_away
from gateway.backends.postgres.leases import HELD_BY, Leases, channel_lease
from gateway.backends.postgres.outgoing_files import take_in_file
from gateway.channelkit.attachments import AttachmentPolicy
from gateway.channelkit.backoff import delay as backoff_delay
from gateway.home import Home, scan_mtimes
from gateway.models import IncomingPayload, OutgoingPayload
from gateway.runtime.aio import finish_or_cancel, wait_event
from gateway.runtime.sending import Sender
from gateway.settings import QueueSettings
from gateway.storable import made_safe
from gateway.telemetry.events import EventLog

log = logging.getLogger("switchyard.pg.delivery")

POLL_S = 2.0  # fallback when no notification arrives (and while LISTEN is reconnecting)
RECONNECT_MAX_S = 10.0
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
Key = tuple[str, str, str]  # (channel type, profile, conversation) as the row has them


class LeaseLost(Exception):
    """This process no longer owns the row's channel profile: it must not touch the row again."""


class PgDelivery:
    """Sends the rows of owned channel profiles once each, in order per conversation.

    The rules of delivery are gateway/runtime/sending.py's; this class finds the heads and keeps the rows. It
    offers the Dispatcher's surface that the Gateway uses (`add_channel`, `channel_for_incoming`,
    `notice`, `rescan`, `schedule`, `stop`; sent rows are pruned with
    the rest of the database by gateway/backends/postgres/maintenance.py), so gateway/app.py swaps it in as is.
    """

    def __init__(self, home: Home, events: EventLog, settings: QueueSettings, dsn: str, leases: Leases, *,
                 extra_roots: Sequence[str | os.PathLike[str]] = (), single_profile_types: Collection[str] = ()):
        self.home = home
        self.events = events
        self.settings = settings
        self.dsn = dsn
        self.leases = leases
        self.attachments = AttachmentPolicy(home, extra_roots)
        self.sender = Sender(self.attachments, events, settings)
        self.single_profile_types = set(single_profile_types)  # rows naming only the type go to its one profile
        self._channels: dict[tuple[str, str], Channel] = {}
        self._active: dict[Key, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._side: set[asyncio.Task[Any]] = set()
        self._pool: Any = None
        self.listening = False
        self.database_error: str | None = None
        self._refused: str | None = None  # the last failure that was not the database away, said once
        self.write_retries = 0  # fenced row writes retried because the database was away

    # --- the Gateway's surface ------------------------------------------------------------

    def start(self) -> None:
        """Starts the delivery loop and the LISTEN connection."""
        from psycopg_pool import AsyncConnectionPool

        from gateway.backends.postgres.pools import check_if_signalled

        # checked without a round trip unless the server sent the idle connection something (a restart)
        self._pool = AsyncConnectionPool(self.dsn, min_size=1, max_size=4, open=False, kwargs={"autocommit": True},
                                         check=check_if_signalled)
        self._tasks = [asyncio.create_task(self._run(), name="pg-delivery"),
                       asyncio.create_task(self._listen(), name="pg-delivery-listen")]

    def add_channel(self, channel: Channel) -> None:
        """A channel whose profile this process now owns: its rows are delivered from now on."""
        self._channels[(channel.name, channel.profile_id)] = channel
        self.wake()

    def remove_channel(self, channel: Channel) -> None:
        """A channel whose lease was lost: its deliveries stop at once (its rows stay as they are)."""
        self._channels.pop((channel.name, channel.profile_id), None)
        for key, task in list(self._active.items()):
            if self._owner_of(key) is None:
                task.cancel()

    def channel_for_incoming(self, message: IncomingPayload) -> Channel | None:
        """The running channel a message came in through (for its typing indicator), if owned here."""
        return self._channels.get((message.channel, message.profile))

    def wake(self) -> None:
        self._wake.set()

    def notice(self, name: str) -> None:
        """A file appeared in `queue/outgoing/`: take it into the table."""
        if name.endswith(".json") and not self._stopping.is_set():
            self._spawn(self._take_in_file(name))

    def rescan(self) -> None:
        """Takes every file waiting in `queue/outgoing/` into the table, oldest first."""
        found = scan_mtimes(self.home.outgoing, lambda name: name.endswith(".json"))
        for name, _ in sorted(found, key=lambda item: (item[1], item[0])):
            self.notice(name)

    def schedule(self, name: str, payload: OutgoingPayload) -> None:
        """A FileOutbox wrote a reply into `queue/outgoing/`: take it into the table."""
        self.notice(name)

    async def stop(self, grace_s: float) -> None:
        """Lets deliveries in progress finish for `grace_s`; undelivered rows stay pending."""
        self._stopping.set()
        self._wake.set()
        await finish_or_cancel(list(self._active.values()), grace_s)
        for task in [*self._tasks, *self._side]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._side, return_exceptions=True)
        if self._pool is not None:
            with suppress(Exception):
                await asyncio.wait_for(self._pool.close(), 5.0)

    # --- finding work ---------------------------------------------------------------------

    def _owned_pairs(self) -> list[tuple[str, str]]:
        pairs = [(kind, profile) for kind, profile in self._channels if self.leases.holds(channel_lease(kind, profile))]
        pairs += [(kind, kind) for kind, _ in pairs if kind in self.single_profile_types]
        return pairs

    def _owner_of(self, key: Key) -> Channel | None:
        channel = self._channels.get((key[0], key[1]))
        if channel is None and key[1] == key[0] and key[0] in self.single_profile_types:
            channel = next((c for (kind, _), c in self._channels.items() if kind == key[0]), None)
        return channel

    async def _run(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                wait = await self._start_due_heads()
            except Exception as exc:
                failures += 1
                self._database_down(exc)
                wait = backoff_delay(failures, 0.5, RECONNECT_MAX_S, jitter=(0.8, 1.2))
            else:
                if failures:
                    self._database_back()
                failures = 0
            await wait_event(self._wake, min(wait, POLL_S))

    async def _start_due_heads(self) -> float:
        """Starts a drain for each owned conversation whose head is due; returns the wait until the next."""
        pairs = self._owned_pairs()
        if not pairs:
            return POLL_S
        await self._pool.open(wait=False)
        async with self._pool.connection(timeout=5.0) as conn:
            cursor = await conn.execute(HEADS, ([p[0] for p in pairs], [p[1] for p in pairs]))
            heads = await cursor.fetchall()
        wait = POLL_S
        for channel, profile, conversation, due_in in heads:
            key: Key = (channel, profile, conversation)
            if key in self._active:
                continue
            if due_in > 0:
                wait = min(wait, due_in)
                continue
            self._active[key] = asyncio.create_task(self._drain(key), name=f"deliver:{'/'.join(key)}")
        return wait

    async def _drain(self, key: Key) -> None:
        """Delivers one conversation's due rows, oldest first, until none is due or the owner changes."""
        try:
            await self.sender.drain(_Rows(self, key), self._stopping.is_set)
        finally:
            self._active.pop(key, None)
            self._wake.set()

    async def _dead(self, row_id: int, lease: str, reason: str, attempts: int) -> None:
        reason = made_safe(reason)  # a platform's error may quote what no column holds
        await self._write("UPDATE switchyard_outbox SET state = 'dead', reason = %s, last_error = %s, attempts = %s "
                          "WHERE id = %s AND state = 'pending' AND " + HELD_BY,
                          (reason, reason, attempts, row_id, lease, self.leases.holder), lease)

    async def _write(self, sql: str, params: tuple[Any, ...], lease: str) -> None:
        """A fenced UPDATE of one row, retried while the database is away and the lease still held;
        LeaseLost when the lease is gone (then the next owner decides)."""
        failures = 0
        while True:
            if not self.leases.holds(lease):
                raise LeaseLost(f"the lease {lease} is no longer held here")
            try:
                async with self._pool.connection(timeout=2.0) as conn:
                    cursor = await conn.execute(sql, params)
                    changed = cursor.rowcount
            except Exception as exc:
                failures += 1
                self.write_retries += 1
                self._database_down(exc)
                await asyncio.sleep(backoff_delay(failures, 0.1, 2.0))
                continue
            if changed == 0:
                raise LeaseLost(f"the lease {lease} is held by another process (or the row changed)")
            return

    # --- the spec-002 folder adapter, retention, reconnection ------------------------------

    async def _take_in_file(self, name: str) -> None:
        await self._pool.open(wait=False)
        await take_in_file(self.home, name, self._pool, self.events, fsync=self.settings.fsync,
                           on_database_error=self._database_down)

    async def _listen(self) -> None:
        """LISTEN switchyard_outbox on a connection of its own; reconnects with backoff."""
        import psycopg

        failures = 0
        while not self._stopping.is_set():
            try:
                async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
                    await conn.execute("LISTEN switchyard_outbox")
                    self.listening = True
                    if failures:
                        self._database_back()
                    failures = 0
                    self._wake.set()  # rows may have come while nobody listened
                    async for _ in conn.notifies():
                        self._wake.set()
            except Exception as exc:
                failures += 1
                self._database_down(exc)
            finally:
                self.listening = False
            await wait_event(self._stopping, backoff_delay(max(1, failures), 0.5, RECONNECT_MAX_S,
                                                           jitter=(0.8, 1.2)))

    def _database_down(self, exc: BaseException) -> None:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if not database_away(exc):  # the database answered (or our code failed): said as what it is, once
            if reason != self._refused:
                log.error("outbox: %s: %s (tried again with backoff)", type(exc).__name__, reason, exc_info=exc)
            self._refused = reason
            return
        if self.database_error is None:
            log.warning("outbox: the database is unreachable, retrying with backoff: %s", reason)
            self.events.emit("outbox.database_unreachable", reason=reason)
        self.database_error = reason

    def _database_back(self) -> None:
        self._refused = None
        if self.database_error is not None:
            log.info("outbox: the database is reachable again")
            self.events.emit("outbox.database_reconnected")
        self.database_error = None

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self._side.add(task)
        task.add_done_callback(self._side.discard)


class _Rows:
    """One conversation's pending rows (a sending.Conversation): a retried head waits in its row
    (`next_attempt_at`), the scan starts the drain again when it is due."""

    def __init__(self, delivery: PgDelivery, key: Key):
        self.delivery = delivery
        self.key = key

    async def head(self) -> _RowHead | None:
        """The oldest pending row when it is due and its profile still owned here; a row that is not a
        payload is dead at once."""
        delivery = self.delivery
        while True:
            channel = delivery._owner_of(self.key)
            if channel is None or not delivery.leases.holds(lease := channel_lease(channel.name, channel.profile_id)):
                return None
            async with delivery._pool.connection(timeout=5.0) as conn:
                row = await (await conn.execute(HEAD, self.key)).fetchone()
            if row is None or not row[5]:
                return None  # none left, or the head waits out its backoff: the scan wakes for it
            row_id, name, raw, attempts, parts_sent = row[:5]
            try:
                payload = OutgoingPayload.model_validate(raw)
            except ValidationError as exc:
                reason = delivery.events.redact(f"invalid outgoing payload: {exc}")
                await delivery._dead(row_id, lease, reason, attempts)
                delivery.sender.undeliverable(name, reason, attempts)
                continue
            journal = RowJournal(delivery, row_id, lease, parts_sent)
            return _RowHead(delivery, row_id, lease, name, payload, channel, attempts, journal)

    async def wait(self, delay_s: float) -> bool:
        return False

    async def failed(self, exc: Exception) -> bool:
        if isinstance(exc, LeaseLost):
            log.info("stopped delivering %s: %s", "/".join(self.key), exc)
        else:  # the database went away mid-drain: the scan picks the head up again
            self.delivery._database_down(exc)
        return False


@dataclass
class _RowHead:
    """An outbox row at the head of its conversation (a sending.Head); every write is fenced by the lease."""

    delivery: PgDelivery
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
        await self._write("UPDATE switchyard_outbox SET state = 'sent', sent_at = now(), parts_sent = '{}', "
                          "last_error = NULL WHERE id = %s AND state = 'pending' AND " + HELD_BY, ())

    async def superseded(self) -> bool:
        key = self.payload.progress_key
        if key is None:
            return False
        async with self.delivery._pool.connection(timeout=5.0) as conn:
            row = await (await conn.execute(SUPERSEDED, (self.row_id, key))).fetchone()
        return bool(row and row[0])

    async def retry(self, attempts: int, error: str, delay_s: float) -> None:
        error = made_safe(self.delivery.events.redact(error))  # may quote a NUL or a lone surrogate: U+FFFD
        await self._write("UPDATE switchyard_outbox SET attempts = %s, last_error = %s, "
                          "next_attempt_at = now() + make_interval(secs => %s) "
                          "WHERE id = %s AND state = 'pending' AND " + HELD_BY, (attempts, error, delay_s))

    async def dead(self, reason: str, attempts: int) -> None:
        await self.delivery._dead(self.row_id, self.lease, reason, attempts)

    async def _write(self, sql: str, params: tuple[Any, ...]) -> None:
        delivery = self.delivery
        await delivery._write(sql, (*params, self.row_id, self.lease, delivery.leases.holder), self.lease)


class RowJournal:
    """The delivery journal of one outbox row (gateway.channelkit.delivery.SharedJournal): its `parts_sent`."""

    def __init__(self, delivery: PgDelivery, row_id: int, lease: str, parts_sent: dict[str, str]):
        self.delivery = delivery
        self.row_id = row_id
        self.lease = lease
        self.sent = {int(index): str(pid) for index, pid in (parts_sent or {}).items()}
        self.database_failed = False

    async def sent_parts(self) -> dict[int, str]:
        return dict(self.sent)

    async def record(self, index: int, platform_id: str) -> None:
        try:
            await self.delivery._write(
                "UPDATE switchyard_outbox SET parts_sent = parts_sent || jsonb_build_object(%s::text, %s::text) "
                "WHERE id = %s AND state = 'pending' AND " + HELD_BY,
                (str(index), platform_id, self.row_id, self.lease, self.delivery.leases.holder), self.lease)
        except LeaseLost:
            self.database_failed = True
            raise
        self.sent[index] = platform_id
