"""ReminderStore on the file backend: `<home>/state/reminders/<id>.json`, one file per reminder, written
atomically (a reader never sees one half written); removing is unlinking, which one process of any sharing
the home wins."""

from __future__ import annotations

import logging
import os

from pydantic import ValidationError

from gateway.home import Home, atomic_write, safe_name
from orchestrator.schedules.reminders import Reminder

log = logging.getLogger("switchyard.schedules")


class FileReminders:
    """The reminders of every conversation under one home's state/reminders/."""

    def __init__(self, home: Home, *, fsync: bool = True):
        self.root = home.state / "reminders"
        self.fsync = fsync

    def add(self, reminder: Reminder) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        atomic_write(self.root / f"{safe_name(reminder.id)}.json", reminder.model_dump_json().encode(),
                     fsync=self.fsync)

    def get(self, reminder_id: str) -> Reminder | None:
        return self._read(f"{safe_name(reminder_id)}.json")

    def all(self) -> list[Reminder]:
        try:
            names = [name for name in os.listdir(self.root) if name.endswith(".json") and not name.startswith(".")]
        except FileNotFoundError:
            return []
        found = [reminder for reminder in map(self._read, names) if reminder is not None]
        return sorted(found, key=lambda r: (r.created_at, r.id))

    def remove(self, reminder_id: str) -> bool:
        try:
            (self.root / f"{safe_name(reminder_id)}.json").unlink()
            return True
        except FileNotFoundError:
            return False

    def _read(self, name: str) -> Reminder | None:
        try:
            return Reminder.model_validate_json((self.root / name).read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValidationError) as exc:
            log.warning("cannot read reminder %s: %s", name, exc)
            return None
