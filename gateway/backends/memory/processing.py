"""What the in-memory backend gives the composed runtime (gateway/runtime/composed.py): the shared in-memory
queue, answered index and key locks. Each Gateway is one host: what its channels write into its home's
incoming/ is taken onto the shared queue, oldest first; any host's worker claims it. Replies are written to the
home of the host that answered (the in-memory backend has no outbox) and delivered by that host's channels."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING

from gateway.backends.memory.queue import MemoryQueue
from gateway.backends.memory.stores import MemoryAnswered, MemoryLocks
from gateway.backends.runtime import Processing, WorkerStores
from gateway.channelkit.edits import to_queue
from gateway.disk.locks import process_name
from gateway.models import IncomingPayload
from gateway.payloads import letter_name, message_identity, parse_payload
from gateway.spool.folders import FolderView

if TYPE_CHECKING:
    from gateway.backends.memory.state import MemoryState
    from gateway.backends.runtime import QueueView, RuntimeParts
    from gateway.outbox import BaseOutbox

_HOSTS = itertools.count(1)


class MemoryProcessing(Processing):
    """gateway.backends.runtime.Processing of one host on a MemoryState (its replies: the host's home's
    queue/outgoing/)."""

    def __init__(self, parts: RuntimeParts, state: MemoryState):
        self.parts = parts
        qs = parts.settings.queue
        self.host = f"{process_name()}:memory-{next(_HOSTS)}"
        self.queue = MemoryQueue(state.queue, worker=self.host, max_payload_bytes=qs.max_payload_bytes)
        self.answered = MemoryAnswered(state.answered, window_sec=qs.duplicate_window_sec)
        self.locks = MemoryLocks(state.locks, holder=self.host, ttl_s=qs.lock_ttl_sec)
        self._watcher: Callable[[], None] | None = None

    @property
    def home_mode(self) -> str:
        return "memory"

    def worker_stores(self, outbox: BaseOutbox) -> WorkerStores:
        """The shared queue, answered index and key locks (on from the start: hosts share the queue)."""
        return WorkerStores(self.queue, self.answered, outbox, locks=self.locks)

    def open(self) -> None:
        """Joins the shared queue; what hosts that stopped left claimed is back in line."""
        for action in self.queue.open():
            self.parts.events.emit("queue.recovered", reason=action)

    def attach(self, wake: Callable[[], None]) -> None:
        """`wake` is called when any host queues a message."""
        self._watcher = wake
        with self.queue.state.lock:
            self.queue.state.watchers.append(wake)

    def take_in(self) -> bool:
        """Moves what this host's channels wrote into incoming/ onto the shared queue, oldest first."""
        incoming = self.parts.queue
        while (claimed := incoming.claim()) is not None:
            if claimed.invalid is not None:  # a FIFO, a link...: quarantined unread, as the file worker does
                incoming.dead_letter(claimed, claimed.invalid)
                continue
            message = self._parsed(claimed.data)
            if message is None:  # the worker quarantines it, once
                self.queue.enqueue(claimed.data, hint=claimed.name.removesuffix(".json"))
            elif (queued := to_queue(self.queue.fold_edit, message)) is not None:  # else folded in its original
                self.queue.enqueue(claimed.data if queued is message else queued.to_json(),
                                   hint=claimed.name.removesuffix(".json"), identity=message_identity(queued))
            incoming.complete(claimed)
        return True

    def queue_view(self) -> QueueView:
        return FolderView(self.parts.home)

    def _parsed(self, data: bytes) -> IncomingPayload | None:
        """A spooled payload as a message (None for one that does not parse: the worker quarantines it,
        once)."""
        try:
            return parse_payload(data, self.parts.settings.queue.max_payload_bytes)
        except ValueError:
            return None

    def close(self) -> None:
        """Leaves the shared queue: what this host still has claimed goes to the next host that looks."""
        with self.queue.state.lock:
            if self._watcher in self.queue.state.watchers:
                self.queue.state.watchers.remove(self._watcher)
        self.queue.close()

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

        name = self.queue.bury(letter_name(message), message.to_json(), reason, errors,
                               conversation=message.conversation, holds=holds)
        if name is not None:
            self.answered.forget(message)
        return name
