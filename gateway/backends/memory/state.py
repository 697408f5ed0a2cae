"""The state every host of one in-memory backend shares (gateway/backends/memory/backend.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.backends.memory.approvals import MemoryApprovals
from gateway.backends.memory.audit import MemoryAuditLog
from gateway.backends.memory.queue import QueueState
from gateway.backends.memory.stores import AnsweredState, LocksState, MemoryPairing


@dataclass
class MemoryState:
    """What every host of one in-memory backend shares: the queue and its dead letters, the answered
    index, the key locks, pairing, tool approvals and the audit log."""

    queue: QueueState = field(default_factory=QueueState)
    answered: AnsweredState = field(default_factory=AnsweredState)
    locks: LocksState = field(default_factory=LocksState)
    pairing: MemoryPairing = field(default_factory=MemoryPairing)
    approvals: MemoryApprovals = field(default_factory=MemoryApprovals)
    audit: MemoryAuditLog = field(default_factory=MemoryAuditLog)
