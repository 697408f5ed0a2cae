"""The in-memory backend: the gateway's stores (gateway/stores.py) kept in this process, with the same
rules as the file and PostgreSQL stores, for fast tests (as Procrastinate's InMemoryConnector and
Dramatiq's StubBroker). Every store takes a shared state object, or is the `twin()` of another handle:
two stores on one state are two "hosts" (or two processes sharing a home) in one test. Thread-safe: each
state has its own lock.
backend.py makes them a backend that runs a real Gateway (runtime.py), for tests only."""

from typing import TYPE_CHECKING

from gateway.backends.memory.approvals import MemoryApprovals
from gateway.backends.memory.queue import MemoryDeadLetters, MemoryQueue, QueueState
from gateway.backends.memory.stores import (
    AnsweredState,
    LocksState,
    MemoryAnswered,
    MemoryEventSink,
    MemoryJournal,
    MemoryLocks,
    MemoryPairing,
)

__all__ = ["AnsweredState", "LocksState", "MemoryAnswered", "MemoryApprovals", "MemoryDeadLetters", "MemoryEventSink",
           "MemoryJournal", "MemoryLocks", "MemoryPairing", "MemoryQueue", "QueueState"]

if TYPE_CHECKING:  # mypy checks that each memory store satisfies its protocol
    from gateway.approvals import FileApprovals
    from gateway.channelkit.pairing import Pairing
    from gateway.stores import (
        AnsweredStore,
        Approvals,
        DeadLetterStore,
        DeliveryJournalStore,
        EventSink,
        Locks,
        QueueStore,
    )

    _queue: type[QueueStore] = MemoryQueue
    _dead: type[DeadLetterStore] = MemoryDeadLetters
    _answered: type[AnsweredStore] = MemoryAnswered
    _journal: type[DeliveryJournalStore] = MemoryJournal
    _sink: type[EventSink] = MemoryEventSink
    _pairing: type[Pairing] = MemoryPairing
    _locks: type[Locks] = MemoryLocks
    _approvals: type[Approvals] = MemoryApprovals
    _file_approvals: type[Approvals] = FileApprovals
