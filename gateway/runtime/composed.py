"""The runtime of a backend whose replies are the home's files (files, memory), composed once of the shared
machinery on what the backend supplies (gateway.backends.Processing): the Worker with its receipts on the
backend's queue, answered index and key locks; the replies as the home's files (gateway/runtime/outgoing.py:
the channels started under supervision, the Dispatcher of queue/outgoing/)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from gateway.backends import WorkerStores
from gateway.runtime.outgoing import OutgoingFolder
from gateway.spool.folders import FolderView

if TYPE_CHECKING:
    from gateway.api import Handler
    from gateway.backends import Delivery, Processing, QueueView, RuntimeParts, Watch, WorkerLoop
    from gateway.models import IncomingPayload


class ComposedRuntime:
    """gateway.backends.Runtime of a Processing: the same worker and delivery whichever backend supplies it."""

    def __init__(self, parts: RuntimeParts, processing: Processing):
        self.parts = parts
        self.processing = processing
        self.outgoing = OutgoingFolder(parts)
        self.outbox = self.outgoing.outbox
        self.worker: WorkerLoop | None = None

    @property
    def home_mode(self) -> str:
        return self.processing.home_mode

    def close_events(self) -> None:
        return None

    def open(self) -> None:
        self.processing.open()

    async def start(self, handler: Handler) -> Delivery | None:
        """Starts the channels (a `run`), the Worker with its receipts, and the dispatcher of the replies."""
        await self.outgoing.start_channels()
        stores = self.processing
        self.worker = self.parts.worker(WorkerStores(stores.queue, stores.answered, self.outbox, locks=stores.locks,
                                                     sharing=stores.sharing), handler,
                                       wants_receipt=self.parts.wants_receipt)
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
        return self.worker.tasks()

    def _wake_worker(self) -> None:
        if self.worker is not None:
            self.worker.wake()

    def wake(self) -> None:
        """A file appeared in incoming/."""
        self.processing.take_in()
        self._wake_worker()

    def stats(self) -> dict[str, Any]:
        return {} if self.worker is None else self.worker.stats()

    async def prune(self) -> None:
        await self.outgoing.prune()

    async def stop(self, grace_s: float) -> None:
        """Finishes or requeues the messages in hand."""
        if self.worker is not None:
            await self.worker.stop(grace_s)

    async def release(self) -> None:
        return None

    async def close(self) -> None:
        self.processing.close()

    def queue_view(self) -> QueueView:
        return FolderView(self.parts.home)

    def dead_letter(self, message: IncomingPayload, reason: str, errors: list[str]) -> str | None:
        """gateway.api.LateDeadLetter: into the backend's dead letters."""
        return self.processing.dead_letter(message, reason, errors)
