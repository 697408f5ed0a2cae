"""Delivers `switchyard_outbox` rows through the channels this process owns (the postgres backend's Dispatcher).

The rules (head of conversation first, retries, dead replies, events) are gateway/runtime/sending.py's; this
module finds the work: only the current owner of a channel profile (its lease, gateway/backends/postgres/leases.py)
delivers that profile's rows, and each conversation with a due head is drained, side by side. The rows
themselves (the heads, the writes fenced by the lease) are gateway/backends/postgres/rows.py's; each part of a
multi-part reply is recorded on its row as it is sent (rows.py RowJournal, gateway/backends/postgres/journal.py,
through gateway.channelkit.delivery.SHARED_JOURNAL), so a restart or a takeover continues after it.

Wake-ups come from LISTEN switchyard_outbox, with a poll as fallback; both reconnect with backoff
after the database goes away. Replies still written as files into `queue/outgoing/` (the spec-002
folder, or a FileOutbox) are taken into the table and removed.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from gateway.aio import finish_or_cancel, wait_event
from gateway.api import Channel
from gateway.backends.postgres.errors import database_away
from gateway.backends.postgres.leases import Leases, channel_lease
from gateway.backends.postgres.outgoing_files import oldest_first, take_in_file
from gateway.backends.postgres.rows import Key, LeaseLost, OutboxRows, RowHead, RowJournal
from gateway.channelkit.attachments import AttachmentPolicy
from gateway.channelkit.backoff import delay as backoff_delay
from gateway.home import Home
from gateway.models import IncomingPayload, OutgoingPayload
from gateway.settings import QueueSettings
from gateway.telemetry.events import EventLog

if TYPE_CHECKING:
    from gateway.backends.runtime import SendLoop

log = logging.getLogger("switchyard.pg.delivery")

POLL_S = 2.0  # fallback when no notification arrives (and while LISTEN is reconnecting)
RECONNECT_MAX_S = 10.0


class PgDelivery:
    """Sends the rows of owned channel profiles once each, in order per conversation.

    The rules of delivery are gateway/runtime/sending.py's and the rows are `rows`' (OutboxRows); this class
    finds the conversations whose head is due and drains them, side by side. It offers the Dispatcher's
    surface that the Gateway uses (`add_channel`, `channel_for_incoming`, `notice`, `rescan`, `schedule`,
    `stop`; sent rows are pruned with the rest of the database by gateway/backends/postgres/maintenance.py),
    so gateway/app.py swaps it in as is.
    """

    def __init__(self, home: Home, events: EventLog, settings: QueueSettings, dsn: str, leases: Leases, *,
                 send_loop: Callable[[AttachmentPolicy], SendLoop], extra_roots: Sequence[str | os.PathLike[str]] = (),
                 single_profile_types: Collection[str] = ()):
        self.home = home
        self.events = events
        self.settings = settings
        self.dsn = dsn
        self.leases = leases
        self.attachments = AttachmentPolicy(home, extra_roots)
        self.sender = send_loop(self.attachments)  # gateway/runtime/sending.py's Sender
        self.single_profile_types = set(single_profile_types)  # rows naming only the type go to its one profile
        self._channels: dict[tuple[str, str], Channel] = {}
        self._active: dict[Key, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._side: set[asyncio.Task[Any]] = set()
        self.rows = OutboxRows(dsn, leases, events, self.database_down)
        self.listening = False
        self.database_error: str | None = None
        self._refused: str | None = None  # the last failure that was not the database away, said once

    # --- the Gateway's surface ------------------------------------------------------------

    def start(self) -> None:
        """Starts the delivery loop and the LISTEN connection."""
        self.rows.open()
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
            if self.owner_of(key) is None:
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
        """Takes every file waiting in `queue/outgoing/` into the table, oldest first and one after the other
        (`oldest_first`): taken in side by side, two replies of one conversation could get their rows, and so
        their order of delivery, the other way round."""
        if not self._stopping.is_set():
            self._spawn(self._take_in_files(oldest_first(self.home)))

    async def _take_in_files(self, names: list[str]) -> None:
        for name in names:
            await self._take_in_file(name)

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
        await self.rows.close()

    # --- finding work ---------------------------------------------------------------------

    def _owned_pairs(self) -> list[tuple[str, str]]:
        pairs = [(kind, profile) for kind, profile in self._channels if self.leases.holds(channel_lease(kind, profile))]
        pairs += [(kind, kind) for kind, _ in pairs if kind in self.single_profile_types]
        return pairs

    def owner_of(self, key: Key) -> Channel | None:
        """The running channel that delivers the conversation `key`, if this process owns its profile."""
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
                self.database_down(exc)
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
        wait = POLL_S
        for channel, profile, conversation, due_in in await self.rows.heads(pairs):
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

    # --- the spec-002 folder adapter, retention, reconnection ------------------------------

    async def _take_in_file(self, name: str) -> None:
        await self.rows.pool.open(wait=False)
        await take_in_file(self.home, name, self.rows.pool, self.events, fsync=self.settings.fsync,
                           on_database_error=self.database_down)

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
                self.database_down(exc)
            finally:
                self.listening = False
            await wait_event(self._stopping, backoff_delay(max(1, failures), 0.5, RECONNECT_MAX_S,
                                                           jitter=(0.8, 1.2)))

    def database_down(self, exc: BaseException) -> None:
        """Says once that the database is away (`database_error`), and once each other failure."""
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

    async def head(self) -> RowHead | None:
        """The oldest pending row when it is due and its profile still owned here; a row that is not a
        payload is dead at once."""
        delivery, rows = self.delivery, self.delivery.rows
        while True:
            channel = delivery.owner_of(self.key)
            if channel is None or not delivery.leases.holds(lease := channel_lease(channel.name, channel.profile_id)):
                return None
            row = await rows.head(self.key)
            if row is None or not row[5]:
                return None  # none left, or the head waits out its backoff: the scan wakes for it
            row_id, name, raw, attempts, parts_sent = row[:5]
            try:
                payload = OutgoingPayload.model_validate(raw)
            except ValidationError as exc:
                reason = delivery.events.redact(f"invalid outgoing payload: {exc}")
                await rows.dead(row_id, lease, reason, attempts)
                delivery.sender.undeliverable(name, reason, attempts)
                continue
            journal = RowJournal(rows, row_id, lease, parts_sent)
            return RowHead(rows, row_id, lease, name, payload, channel, attempts, journal)

    async def wait(self, delay_s: float) -> bool:
        return False

    async def failed(self, exc: Exception) -> bool:
        if isinstance(exc, LeaseLost):
            log.info("stopped delivering %s: %s", "/".join(self.key), exc)
        else:  # the database went away mid-drain: the scan picks the head up again
            self.delivery.database_down(exc)
        return False
