"""The runtime of every backend, composed once of the shared machinery on what the backend supplies
(gateway.backends.runtime.Processing): the Worker on the backend's queue, answered index and key locks, with its
receipts unless the backend sends them; the replies through the backend's Outgoing, or as the home's files
(gateway/runtime/outgoing.py: the channels started under supervision, the Dispatcher of queue/outgoing/)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from gateway.runtime.outgoing import OutgoingFolder

if TYPE_CHECKING:
    from gateway.api import Handler
    from gateway.backends.runtime import Delivery, Outgoing, Processing, QueueView, RuntimeParts, Watch, WorkerLoop
    from gateway.models import IncomingPayload


class ComposedRuntime:
    """gateway.backends.runtime.Runtime of a Processing: the same worker and delivery whichever backend supplies it."""

    def __init__(self, parts: RuntimeParts, processing: Processing):
        self.parts = parts
        self.processing = processing
        self.outgoing: Outgoing = processing.outgoing or OutgoingFolder(parts)
        self.outbox = self.outgoing.outbox
        self.worker: WorkerLoop | None = None

    @property
    def home_mode(self) -> str:
        return self.processing.home_mode

    def close_events(self) -> None:
        self.processing.close_events()

    def open(self) -> None:
        self.processing.open()

    async def start(self, handler: Handler) -> Delivery | None:
        """Starts the channels (a `run`), the Worker with what takes messages in, and the delivery of the replies."""
        await self.outgoing.start_channels()
        wants_receipt = None if self.outgoing.sends_receipts else self.parts.wants_receipt
        self.worker = self.parts.worker(self.processing.worker_stores(self.outbox), handler,
                                        wants_receipt=wants_receipt)
        await self.processing.start(self.worker)
        return self.outgoing.start_delivery()

    def watch(self, watch: Watch) -> None:
        self.processing.watch(watch, self._share_requested)

    def _share_requested(self) -> None:
        if self.worker is not None:
            self.worker.request_share()

    def run(self) -> list[asyncio.Task[None]]:
        loop = asyncio.get_running_loop()

        def wake_soon() -> None:
            if not loop.is_closed():  # a host whose loop ended without closing must not fail another's intake
                loop.call_soon_threadsafe(self._wake_worker)

        self.processing.attach(wake_soon)
        self.processing.take_in()
        assert self.worker is not None
        return [*self.worker.tasks(), *self.outgoing.tasks()]

    def _wake_worker(self) -> None:
        if self.worker is not None:
            self.worker.wake()

    def wake(self) -> None:
        """A file appeared in incoming/."""
        if self.processing.take_in():
            self._wake_worker()

    def stats(self) -> dict[str, Any]:
        worker = self.worker.stats() if self.worker is not None else {"running": 0, "pending": 0, "processed": 0}
        return {**worker, **self.processing.stats()}

    async def prune(self) -> None:
        await self.outgoing.prune()
        await self.processing.prune()

    async def stop(self, grace_s: float) -> None:
        """Stops the receipts and the intake, then finishes or puts back the messages in hand."""
        await self.outgoing.stop()
        self.processing.stop_intake()
        if self.worker is not None:
            await self.worker.stop(grace_s)
        await self.processing.stop()

    async def release(self) -> None:
        await self.outgoing.release()

    async def close(self) -> None:
        self.processing.close()

    def queue_view(self) -> QueueView:
        return self.processing.queue_view()

    def dead_letter(self, message: IncomingPayload, reason: str, errors: list[str]) -> str | None:
        """gateway.api.LateDeadLetter: into the backend's dead letters."""
        return self.processing.dead_letter(message, reason, errors)
