"""The in-memory backend's runtime, composed of the shared machinery (gateway/runtime/: the Worker with its
receipts; the replies as the home's files, gateway/runtime/outgoing.py: the channels and the Dispatcher) on
the shared in-memory queue, answered index and key locks. Each Gateway is one host: what its channels write
into its home's incoming/ is taken onto the shared queue, oldest first; any host's worker claims it. Replies
are written to the home of the host that answered (the in-memory backend has no outbox) and delivered by
that host's channels.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import TYPE_CHECKING, Any

from gateway.api import Handler
from gateway.backends import QueueView
from gateway.backends.memory.queue import MemoryQueue
from gateway.backends.memory.stores import MemoryAnswered, MemoryLocks
from gateway.channelkit.edits import to_queue
from gateway.disk.locks import process_name
from gateway.models import IncomingPayload
from gateway.payloads import letter_name, message_identity, parse_payload
from gateway.runtime.outgoing import OutgoingFolder
from gateway.runtime.worker import Worker
from gateway.spool.folders import FolderView

if TYPE_CHECKING:
    from collections.abc import Callable

    from gateway.backends import Delivery, RuntimeParts, Watch
    from gateway.backends.memory.state import MemoryState

_HOSTS = itertools.count(1)


class MemoryRuntime:
    """One host on a MemoryState (gateway.backends.Runtime)."""

    def __init__(self, parts: RuntimeParts, state: MemoryState):
        self.parts = parts
        qs = parts.settings.queue
        self.host = f"{process_name()}:memory-{next(_HOSTS)}"
        self.memory_queue = MemoryQueue(state.queue, worker=self.host, max_payload_bytes=qs.max_payload_bytes)
        self.memory_answered = MemoryAnswered(state.answered, window_sec=qs.duplicate_window_sec)
        self.memory_locks = MemoryLocks(state.locks, holder=self.host, ttl_s=qs.lock_ttl_sec)
        self.outgoing = OutgoingFolder(parts)
        self.outbox = self.outgoing.outbox
        self.worker: Worker | None = None
        self._watcher: Callable[[], None] | None = None

    @property
    def home_mode(self) -> str:
        return "memory"

    def close_events(self) -> None:
        return None

    def open(self) -> None:
        """Joins the shared queue; what hosts that stopped left claimed is back in line."""
        for action in self.memory_queue.open():
            self.parts.events.emit("queue.recovered", reason=action)

    async def start(self, handler: Handler) -> Delivery | None:
        """Starts the channels (a `run`), the shared Worker over the shared queue with key locks on from the
        start (other hosts share it), and the dispatcher of this host's replies."""
        await self.outgoing.start_channels()
        parts = self.parts
        self.worker = Worker(self.memory_queue, handler, self.outbox, self.memory_answered, parts.events,
                             parts.settings.queue, on_start=parts.show_typing, locks=self.memory_locks,
                             wants_receipt=parts.takes_receipts)
        return self.outgoing.start_delivery()

    def watch(self, watch: Watch) -> None:
        """No home to share: hosts share the state."""

    def run(self) -> list[asyncio.Task[None]]:
        loop = asyncio.get_running_loop()

        def watcher() -> None:
            if not loop.is_closed():  # a host whose loop ended without closing must not fail another's intake
                loop.call_soon_threadsafe(self._wake_worker)

        self._watcher = watcher
        with self.memory_queue.state.lock:
            self.memory_queue.state.watchers.append(self._watcher)
        self._take_in()
        assert self.worker is not None
        return self.worker.tasks()

    def _wake_worker(self) -> None:
        """Has the worker look at the shared queue (another host queued a message)."""
        if self.worker is not None:
            self.worker.wake()

    def wake(self) -> None:
        self._take_in()
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

    def queue_view(self) -> QueueView:
        return FolderView(self.parts.home)

    def _take_in(self) -> None:
        """Moves what this host's channels wrote into incoming/ onto the shared queue, oldest first."""
        incoming = self.parts.queue
        while (claimed := incoming.claim()) is not None:
            if claimed.invalid is not None:  # a FIFO, a link...: quarantined unread, as the file worker does
                incoming.dead_letter(claimed, claimed.invalid)
                continue
            message = self._parsed(claimed.data)
            if message is None:  # the worker quarantines it, once
                self.memory_queue.enqueue(claimed.data, hint=claimed.name.removesuffix(".json"))
            elif (queued := to_queue(self.memory_queue.fold_edit, message)) is not None:  # else folded in its original
                self.memory_queue.enqueue(claimed.data if queued is message else queued.to_json(),
                                          hint=claimed.name.removesuffix(".json"), identity=message_identity(queued))
            incoming.complete(claimed)

    def _parsed(self, data: bytes) -> IncomingPayload | None:
        """A spooled payload as a message (None for one that does not parse: the worker quarantines it,
        once)."""
        try:
            return parse_payload(data, self.parts.settings.queue.max_payload_bytes)
        except ValueError:
            return None

    async def close(self) -> None:
        """Leaves the shared queue: what this host still has claimed goes to the next host that looks."""
        with self.memory_queue.state.lock:
            if self._watcher in self.memory_queue.state.watchers:
                self.memory_queue.state.watchers.remove(self._watcher)
        self.memory_queue.close()

    def dead_letter(self, message: IncomingPayload, reason: str, errors: list[str]) -> str | None:
        """gateway.api.LateDeadLetter: into the shared dead letters under the file backend's name for it,
        answered no more (a retry runs it); None while the message is still queued or claimed."""
        identity = message_identity(message)
        limit = self.parts.settings.queue.max_payload_bytes

        def holds(data: bytes) -> bool:
            try:
                return message_identity(parse_payload(data, limit)) == identity
            except ValueError:
                return False

        name = self.memory_queue.bury(letter_name(message), message.to_json(), reason, errors,
                                      conversation=message.conversation, holds=holds)
        if name is not None:
            self.memory_answered.forget(message)
        return name
