"""The postgres backend's runtime (gateway/stores.py): intake and processing on the database, and in a
`run` the channels under their leases with the delivery of their replies."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.api import Handler
from gateway.backends import Delivery, QueueView, RuntimeParts, Watch
from gateway.backends.postgres.dashboard import PgQueueView
from gateway.backends.postgres.db import SharedPool
from gateway.backends.postgres.events import attach_event_sink
from gateway.backends.postgres.latedead import PgLateDeadLetters
from gateway.backends.postgres.outbound import PgOutbound
from gateway.backends.postgres.processing import PgProcessing
from gateway.backends.postgres.receipts import PgReceipts
from gateway.channelkit.attachments import extra_file_roots
from gateway.models import IncomingPayload
from gateway.outbox import BaseOutbox


class PostgresRuntime:
    """PgProcessing takes in and processes; in a `run`, PgOutbound runs the channels under their leases and
    delivers from the database, and PgReceipts tells the senders of its profiles that wait behind their
    conversation."""

    home_mode = "database"

    def __init__(self, parts: RuntimeParts, dsn: str, pool: SharedPool):
        self.parts = parts
        self.dsn = dsn
        self.pool = pool  # its backend's (gateway/backends/postgres/backend.py), closed with it
        self.close_events = attach_event_sink(parts.events, dsn)  # every event also into switchyard_events
        self.pg = PgProcessing(parts.home, parts.settings, parts.events, role=parts.role,
                            extra_roots=extra_file_roots(parts.home, parts.settings), pool=pool,
                            named_by_message_id=parts.named_by_message_id)
        self.outbox: BaseOutbox = self.pg.outbox
        self.outbound: PgOutbound | None = None  # in a `run`
        self.receipts: PgReceipts | None = None  # in a `run`
        self._receipts_task: asyncio.Task[None] | None = None

    def open(self) -> None:
        return None

    async def start(self, handler: Handler) -> Delivery | None:
        """Takes the free channel leases and starts their channels (a `run`), then processing."""
        parts = self.parts
        if parts.role == "run":  # each profile connected here only while this process owns it
            self.outbound = PgOutbound(parts.supervisor, parts.home, parts.settings, parts.events,
                                       send_loop=parts.send_loop, dsn=self.dsn)
            await self.outbound.start()
        await self.pg.start(handler, parts.queue, parts.worker)
        if self.outbound is None:
            return None
        self.receipts = PgReceipts(self.dsn, self.pg.outbox, parts.events, parts.settings.queue,
                                   profiles=parts.receipt_profiles)
        return self.outbound.delivery

    def watch(self, watch: Watch) -> None:
        return None

    def run(self) -> list[asyncio.Task[None]]:
        self.pg.wake()
        if self.receipts is None:
            return []
        self._receipts_task = asyncio.create_task(self.receipts.run(), name="pg-receipts")
        return [self._receipts_task]

    def wake(self) -> None:
        self.pg.wake()

    def stats(self) -> dict[str, Any]:
        return self.pg.stats()

    async def prune(self) -> None:
        await self.pg.prune()  # every shared table, sent replies included, whatever this process's role

    async def stop(self, grace_s: float) -> None:
        """Stops sending receipts (its channels are about to stop), then processing."""
        if self._receipts_task is not None:
            self._receipts_task.cancel()
            await asyncio.gather(self._receipts_task, return_exceptions=True)
        await self.pg.stop(grace_s)

    async def release(self) -> None:
        """Releases the leases once their channels are stopped."""
        if self.outbound is not None:
            await self.outbound.stop()

    async def close(self) -> None:
        """Nothing left open: its pools closed with processing and delivery, the shared one is its backend's
        (closed by the gateway after this: the handler may still push a result while stopping)."""

    def queue_view(self) -> QueueView:
        return PgQueueView(self.dsn, self.parts.settings.queue, self.parts.home, self.pool)

    def dead_letter(self, message: IncomingPayload, reason: str, errors: list[str]) -> str | None:
        """gateway.api.LateDeadLetter: its row turned dead (gateway/backends/postgres/latedead.py)."""
        return PgLateDeadLetters(self.dsn, self.pool).bury(message, reason, errors)
