"""The file backend's runtime (gateway/stores.py): the FileQueue's Worker (with receipts, locks, a shared
home), and the replies as the home's files (gateway/runtime/outgoing.py: the channels started under
supervision, the Dispatcher of queue/outgoing/)."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.api import Handler
from gateway.backends import Delivery, QueueView, RuntimeParts, Watch
from gateway.backends.files.answered import AnsweredIndex
from gateway.backends.files.latedead import FileLateDeadLetters
from gateway.disk.locks import LockDirectory, process_name
from gateway.models import IncomingPayload
from gateway.runtime.outgoing import OutgoingFolder
from gateway.runtime.sharing import SharedHome
from gateway.runtime.worker import Worker
from gateway.spool.folders import FolderView


class FileRuntime:
    """The embedded default: processing and delivery in the home's folders."""

    def __init__(self, parts: RuntimeParts, sharing: SharedHome):
        self.parts = parts
        home, qs = parts.home, parts.settings.queue
        self.answered = AnsweredIndex(home.state / "answered.jsonl", window_sec=qs.duplicate_window_sec,
                                      fsync=qs.fsync)
        self.outgoing = OutgoingFolder(parts)
        self.outbox = self.outgoing.outbox
        self.sharing = sharing  # the backend's: its job locks follow the same mode
        self.late_dead = FileLateDeadLetters(home, self.answered, fsync=qs.fsync,
                                             max_payload_bytes=qs.max_payload_bytes)
        self.worker: Worker | None = None

    @property
    def home_mode(self) -> str:
        return self.sharing.mode

    def close_events(self) -> None:
        return None

    def open(self) -> None:
        """Opens the answered index and takes this process's place on the home (before the handler starts:
        its job locks follow the home's mode from its first recovery on)."""
        self.answered.open()
        self.sharing.open()

    async def start(self, handler: Handler) -> Delivery | None:
        """Starts the channels (a `run`), the worker with its receipts, and the dispatcher."""
        await self.outgoing.start_channels()
        home, qs = self.parts.home, self.parts.settings.queue
        locks = LockDirectory(home.coordination / "locks", holder=process_name(), ttl_s=qs.lock_ttl_sec)
        self.worker = Worker(self.parts.queue, handler, self.outbox, self.answered, self.parts.events, qs,
                             on_start=self.parts.show_typing, locks=locks, sharing=self.sharing,
                             wants_receipt=self.parts.takes_receipts)
        return self.outgoing.start_delivery()

    def watch(self, watch: Watch) -> None:
        """Watches the requests of other processes to share the home."""
        watch(self.sharing.requests, lambda name: self._share_requested(), self._share_requested)
        self._share_requested()

    def _share_requested(self) -> None:
        if self.worker is not None:
            self.worker.request_share()

    def run(self) -> list[asyncio.Task[None]]:
        assert self.worker is not None
        return self.worker.tasks()

    def wake(self) -> None:
        if self.worker is not None:
            self.worker.wake()

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
        self.answered.close()
        self.sharing.close()

    def queue_view(self) -> QueueView:
        return FolderView(self.parts.home)

    def dead_letter(self, message: IncomingPayload, reason: str, errors: list[str]) -> str | None:
        """gateway.api.LateDeadLetter: into failed/ (gateway/backends/files/latedead.py)."""
        return self.late_dead.bury(message, reason, errors)
