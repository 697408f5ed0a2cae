"""Every store of every backend has its protocol's methods with the protocol's parameters (names, kinds,
defaults), so a caller written against gateway/stores.py or orchestrator/storage/stores.py works on any of them.
(mypy checks the memory stores statically: gateway/backends/memory/__init__.py, orchestrator/storage/memory.py.)"""

from __future__ import annotations

import inspect

import pytest

from gateway.approvals import FileApprovals
from gateway.backends.files.answered import AnsweredIndex
from gateway.backends.files.backend import FileDeadLetters
from gateway.backends.memory import (
    MemoryAnswered,
    MemoryApprovals,
    MemoryDeadLetters,
    MemoryEventSink,
    MemoryJournal,
    MemoryLocks,
    MemoryPairing,
    MemoryQueue,
)
from gateway.backends.postgres.answered import PgAnswered
from gateway.backends.postgres.approvals import PgApprovals
from gateway.backends.postgres.deadletters import DeadStore
from gateway.backends.postgres.events import EventSink as PgEventSink
from gateway.backends.postgres.journal import PgJournal
from gateway.backends.postgres.locks import PgLocks
from gateway.backends.postgres.pairing import PgPairingStore
from gateway.channelkit.access import PairingStore
from gateway.channelkit.delivery import DeliveryJournal
from gateway.channelkit.pairing import Pairing
from gateway.disk.locks import LockDirectory
from gateway.spool.queue import FileQueue
from gateway.stores import AnsweredStore, Approvals, DeadLetterStore, DeliveryJournalStore, EventSink, Locks, QueueStore
from orchestrator.agents.sessions import FileRecords, Records
from orchestrator.schedules.records import MemoryScheduleRecords, ScheduleRecords
from orchestrator.schedules.reminders import MemoryReminders, ReminderStore
from orchestrator.storage.files.reminders import FileReminders
from orchestrator.storage.files.runs import RunStore
from orchestrator.storage.files.schedules import FileScheduleRecords
from orchestrator.storage.files.usage import FileUsageRecords
from orchestrator.storage.memory import MemoryRecords, MemoryRunStore
from orchestrator.storage.postgres.reminders import PgReminders
from orchestrator.storage.postgres.runs import PgRunStore
from orchestrator.storage.postgres.schedules import PgScheduleRecords
from orchestrator.storage.postgres.sessions import PgRecords
from orchestrator.storage.postgres.usage import PgUsageRecords
from orchestrator.storage.stores import RunRecords
from orchestrator.usage.records import MemoryUsageRecords, UsageRecords

IMPLEMENTATIONS: list[tuple[type, list[type]]] = [
    (QueueStore, [MemoryQueue, FileQueue]),
    (DeadLetterStore, [MemoryDeadLetters, FileDeadLetters, DeadStore]),
    (AnsweredStore, [MemoryAnswered, AnsweredIndex, PgAnswered]),
    (DeliveryJournalStore, [MemoryJournal, DeliveryJournal, PgJournal]),
    (EventSink, [MemoryEventSink, PgEventSink]),
    (Pairing, [MemoryPairing, PairingStore, PgPairingStore]),
    (Locks, [MemoryLocks, LockDirectory, PgLocks]),
    (Approvals, [MemoryApprovals, FileApprovals, PgApprovals]),
    (RunRecords, [MemoryRunStore, RunStore, PgRunStore]),
    (Records, [MemoryRecords, FileRecords, PgRecords]),
    (ScheduleRecords, [MemoryScheduleRecords, FileScheduleRecords, PgScheduleRecords]),
    (UsageRecords, [MemoryUsageRecords, FileUsageRecords, PgUsageRecords]),
    (ReminderStore, [MemoryReminders, FileReminders, PgReminders]),
]


def methods(protocol: type) -> list[str]:
    return [name for name, value in vars(protocol).items() if callable(value) and not name.startswith("_")]


def parameters(function: object) -> list[tuple[str, object, bool]]:
    """(name, kind, has a default) of each parameter but `self`."""
    signature = inspect.signature(function)  # type: ignore[arg-type]
    return [(p.name, p.kind, p.default is not inspect.Parameter.empty)
            for p in list(signature.parameters.values())[1:]]


@pytest.mark.parametrize(("protocol", "implementation"),
                         [(protocol, impl) for protocol, impls in IMPLEMENTATIONS for impl in impls],
                         ids=lambda value: getattr(value, "__qualname__", str(value)))
def test_each_store_takes_its_protocols_calls(protocol: type, implementation: type) -> None:
    assert methods(protocol), f"{protocol.__name__} names no method"
    for name in methods(protocol):
        assert hasattr(implementation, name), f"{implementation.__qualname__} has no {name}"
        wanted, found = parameters(getattr(protocol, name)), parameters(getattr(implementation, name))
        assert [(n, k) for n, k, _ in found[:len(wanted)]] == [(n, k) for n, k, _ in wanted], \
            f"{implementation.__qualname__}.{name}{found} is not {protocol.__name__}.{name}{wanted}"
        assert all(has_default for _, _, has_default in found[len(wanted):]), \
            f"{implementation.__qualname__}.{name} asks for more than {protocol.__name__}.{name} gives"
        assert all(f[2] or not w[2] for f, w in zip(found, wanted, strict=False)), \
            f"{implementation.__qualname__}.{name} needs an argument {protocol.__name__}.{name} may leave out"
