"""The replies of a process on the postgres backend (gateway.backends.runtime.Outgoing): rows of
`switchyard_outbox`, and in a `run` the channels under their leases delivering them
(gateway/backends/postgres/outbound.py) and the "queued" receipts sent from the database
(gateway/backends/postgres/receipts.py), once across processes."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from gateway.backends.postgres.outbound import PgOutbound
from gateway.backends.postgres.receipts import PgReceipts

if TYPE_CHECKING:
    from gateway.backends.postgres.outbox import PgOutbox
    from gateway.backends.runtime import Delivery, RuntimeParts


class PgOutgoing:
    """The outbox's rows; in a `run` (`parts.role`), the channels owned here, their delivery and the receipts."""

    sends_receipts = True

    def __init__(self, outbox: PgOutbox, dsn: str, parts: RuntimeParts):
        self.outbox = outbox
        self.dsn = dsn
        self.parts = parts
        self.outbound: PgOutbound | None = None  # in a `run`
        self.receipts: PgReceipts | None = None  # in a `run`
        self._receipts_task: asyncio.Task[None] | None = None

    async def start_channels(self) -> None:
        """Takes the free channel leases and starts their channels (a `run`): each profile connected here only
        while this process owns it."""
        parts = self.parts
        if parts.role == "run":
            self.outbound = PgOutbound(parts.supervisor, parts.home, parts.settings, parts.events,
                                       send_loop=parts.send_loop, dsn=self.dsn)
            await self.outbound.start()

    def start_delivery(self) -> Delivery | None:
        if self.outbound is None:
            return None
        self.receipts = PgReceipts(self.dsn, self.outbox, self.parts.events, self.parts.settings.queue,
                                   profiles=self.parts.receipt_profiles)
        return self.outbound.delivery

    def tasks(self) -> list[asyncio.Task[None]]:
        if self.receipts is None:
            return []
        self._receipts_task = asyncio.create_task(self.receipts.run(), name="pg-receipts")
        return [self._receipts_task]

    async def stop(self) -> None:
        """Stops sending receipts: its channels are about to stop."""
        if self._receipts_task is not None:
            self._receipts_task.cancel()
            await asyncio.gather(self._receipts_task, return_exceptions=True)

    async def release(self) -> None:
        """Releases the leases once their channels are stopped."""
        if self.outbound is not None:
            await self.outbound.stop()

    async def prune(self) -> None:
        """Sent rows are pruned with the rest of the database (PgProcessing.prune)."""
