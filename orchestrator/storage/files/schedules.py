"""ScheduleRecords on the file backend: `<home>/state/schedules/<schedule>/`, one JSON file per claimed
occurrence, named by its time.

A claim is the file's creation, linked into place only if absent (os.link fails on an existing name), so of
any processes sharing the home exactly one claims an occurrence, and its file is never seen half written.
Changing a claim (`take_over`, `finish`) holds the folder's `.lock` (flock) and rewrites the file atomically.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gateway.home import Home, atomic_write, safe_name
from orchestrator.schedules.records import KEPT, Fire


def _name(occurrence: datetime) -> str:
    return f"{int(occurrence.timestamp() * 1000):015d}.json"


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(UTC).isoformat()


def _time(text: Any) -> datetime | None:
    return datetime.fromisoformat(text) if isinstance(text, str) else None


class FileScheduleRecords:
    """Claims and outcomes of every schedule under one home's state/schedules/."""

    def __init__(self, home: Home, *, fsync: bool = True):
        self.root = home.state / "schedules"
        self.fsync = fsync

    def _folder(self, schedule: str) -> Path:
        folder = self.root / safe_name(schedule)
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def _create(self, path: Path, body: dict[str, Any]) -> bool:
        """Writes `path` only if it does not exist (whole, or not at all); True when this call created it."""
        temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")  # each caller's own, threads too
        atomic_write(temporary, json.dumps(body).encode(), fsync=self.fsync)
        try:
            os.link(temporary, path)
            return True
        except FileExistsError:
            return False
        finally:
            temporary.unlink(missing_ok=True)

    @contextlib.contextmanager
    def _locked(self, schedule: str) -> Iterator[Path]:
        folder = self._folder(schedule)
        with open(folder / ".lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield folder
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def since(self, schedule: str, now: datetime) -> datetime:
        path = self._folder(schedule) / "since.json"
        if not path.exists():  # one write per schedule, ever: a pass reads it
            self._create(path, {"since": _iso(now)})
        found = _time(json.loads(path.read_bytes()).get("since"))
        return found or now

    def claim(self, schedule: str, occurrence: datetime, holder: str, now: datetime) -> bool:
        folder = self._folder(schedule)
        claimed = self._create(folder / _name(occurrence), {"schedule": schedule, "occurrence": _iso(occurrence),
                                                             "holder": holder, "claimed_at": _iso(now)})
        if claimed:
            for old in self._names(folder)[:-KEPT]:
                (folder / old).unlink(missing_ok=True)
        return claimed

    def take_over(self, schedule: str, occurrence: datetime, holder: str, new_holder: str, now: datetime) -> bool:
        with self._locked(schedule) as folder:
            fire = self._read(folder / _name(occurrence))
            if fire is None or fire.get("outcome") is not None or fire.get("holder") != holder:
                return False
            atomic_write(folder / _name(occurrence), json.dumps({**fire, "holder": new_holder,
                                                                 "claimed_at": _iso(now)}).encode(), fsync=self.fsync)
            return True

    def finish(self, schedule: str, occurrence: datetime, outcome: str, *, detail: str | None = None,
               message_id: str | None = None, now: datetime) -> None:
        with self._locked(schedule) as folder:
            fire = self._read(folder / _name(occurrence))
            if fire is not None:
                body = {**fire, "outcome": outcome, "detail": detail, "message_id": message_id,
                        "finished_at": _iso(now)}
                atomic_write(folder / _name(occurrence), json.dumps(body).encode(), fsync=self.fsync)

    def latest(self, schedule: str, limit: int = 1) -> list[Fire]:
        folder = self._folder(schedule)
        fires = (self._fire(folder / name) for name in reversed(self._names(folder)))
        return [fire for fire in fires if fire is not None][:limit]

    def unfinished(self, schedule: str) -> list[Fire]:
        folder = self._folder(schedule)
        fires = (self._fire(folder / name) for name in self._names(folder))
        return [fire for fire in fires if fire is not None and fire.outcome is None]

    @staticmethod
    def _names(folder: Path) -> list[str]:
        return sorted(name for name in os.listdir(folder) if name[:1].isdigit() and name.endswith(".json"))

    @staticmethod
    def _read(path: Path) -> dict[str, Any] | None:
        try:
            body = json.loads(path.read_bytes())
        except (OSError, ValueError):
            return None
        return body if isinstance(body, dict) else None

    def _fire(self, path: Path) -> Fire | None:
        body = self._read(path)
        if body is None:
            return None
        occurrence, claimed_at = _time(body.get("occurrence")), _time(body.get("claimed_at"))
        if occurrence is None or claimed_at is None:
            return None
        return Fire(schedule=str(body.get("schedule")), occurrence=occurrence, holder=str(body.get("holder")),
                    claimed_at=claimed_at, outcome=body.get("outcome"), detail=body.get("detail"),
                    message_id=body.get("message_id"), finished_at=_time(body.get("finished_at")))
