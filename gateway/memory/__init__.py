"""The in-memory backend: the gateway's stores (gateway/stores.py) kept in this process, with the same
rules as the file and PostgreSQL stores, for fast tests (as Procrastinate's InMemoryConnector and
Dramatiq's StubBroker). Every store takes a shared state object: two stores on one state are two
"hosts" (or two processes sharing a home) in one test. Thread-safe: each state has its own lock."""

from gateway.memory.queue import MemoryDeadLetters, MemoryQueue, QueueState
from gateway.memory.stores import (
    AnsweredState,
    LocksState,
    MemoryAnswered,
    MemoryEventSink,
    MemoryJournal,
    MemoryLocks,
    MemoryPairing,
)

__all__ = ["AnsweredState", "LocksState", "MemoryAnswered", "MemoryDeadLetters", "MemoryEventSink", "MemoryJournal",
           "MemoryLocks", "MemoryPairing", "MemoryQueue", "QueueState"]
