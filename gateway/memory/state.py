"""The state every host of one in-memory backend shares (gateway/memory/backend.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.memory.queue import QueueState
from gateway.memory.stores import AnsweredState, LocksState, MemoryPairing


@dataclass
class MemoryState:
    """What every host of one in-memory backend shares: the queue and its dead letters, the answered
    index, the key locks and pairing."""

    queue: QueueState = field(default_factory=QueueState)
    answered: AnsweredState = field(default_factory=AnsweredState)
    locks: LocksState = field(default_factory=LocksState)
    pairing: MemoryPairing = field(default_factory=MemoryPairing)
