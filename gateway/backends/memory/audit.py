"""The in-memory audit log (gateway.stores.AuditLog), shared by the handles of one MemoryState."""

from __future__ import annotations

import threading
from datetime import datetime

from gateway.audit import AuditRecord, selected


class MemoryAuditLog:
    """Records in a list, each id once; `twin()` is another handle on the same records (another host)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: dict[str, AuditRecord] = {}

    def twin(self) -> MemoryAuditLog:
        other = MemoryAuditLog()
        other._lock, other._records = self._lock, self._records
        return other

    def append(self, record: AuditRecord) -> bool:
        with self._lock:
            if record.id in self._records:
                return False
            self._records[record.id] = record
            return True

    def records(self, *, since: datetime | None = None, by: str | None = None) -> list[AuditRecord]:
        with self._lock:
            stored = list(self._records.values())
        return selected(stored, since, by)
