"""The file backend's audit log (gateway.stores.AuditLog): `state/audit.jsonl`, one record a line, appended under
an exclusive lock of the file so that processes sharing the home add each record once."""

from __future__ import annotations

import fcntl
import json
import logging
import os
from datetime import datetime
from pathlib import Path

from gateway.audit import AuditRecord, selected

log = logging.getLogger(__name__)


class FileAuditLog:
    """Records in `path`; an append reads the ids under the lock first (the log stays small: one line per
    privileged action), and is fsynced when `fsync`."""

    def __init__(self, path: Path, *, fsync: bool = True):
        self.path = path
        self._fsync = fsync

    def append(self, record: AuditRecord) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a+", encoding="utf-8") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            handle.seek(0)
            if any(stored.id == record.id for stored in _parsed(handle.read(), self.path)):
                return False
            handle.write(json.dumps(record.to_json(), sort_keys=True) + "\n")
            handle.flush()
            if self._fsync:
                os.fsync(handle.fileno())
            return True

    def records(self, *, since: datetime | None = None, by: str | None = None) -> list[AuditRecord]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        return selected(list(_parsed(text, self.path)), since, by)


def _parsed(text: str, path: Path) -> list[AuditRecord]:
    """The records of the file's lines; a torn last line (a crash mid-write) is skipped with a warning."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            found.append(AuditRecord.from_json(json.loads(line)))
        except (ValueError, KeyError, TypeError):
            log.warning("%s:%d: not an audit record, skipped", path, number)
    return found
