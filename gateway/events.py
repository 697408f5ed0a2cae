"""The structured event log: `logs/events.jsonl`, one JSON object a line."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

log = logging.getLogger("switchyard.events")

Observer = Callable[[dict[str, Any]], None]


def utc_now_iso() -> str:
    """The current time as UTC ISO 8601 with milliseconds."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class EventLog:
    """Appends events to the log file and tells observers; secrets are masked before anything is written."""

    def __init__(self, path: Path, *, secrets: Iterable[str] = (), observers: Iterable[Observer] = ()):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._secrets = [s for s in secrets if len(s) >= 4]
        self._observers = list(observers)

    def add_secret(self, value: str) -> None:
        """Registers a value that must never appear in the log (a token, a signing secret)."""
        if len(value) >= 4 and value not in self._secrets:
            self._secrets.append(value)

    def add_observer(self, observer: Observer) -> None:
        self._observers.append(observer)

    def redact(self, text: str) -> str:
        """Masks every registered secret in `text`."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        """Writes one event with `ts` and `event` plus the given fields (None values left out)."""
        record = {"ts": utc_now_iso(), "event": event}
        record.update({k: v for k, v in fields.items() if v is not None})
        line = self.redact(json.dumps(record, default=str, ensure_ascii=False))
        try:
            os.write(self._fd, (line + "\n").encode())
        except OSError as exc:
            log.error("cannot write event log %s: %s", self.path, exc)
        for observer in self._observers:
            try:
                observer(record)
            except Exception:
                log.exception("event observer failed for %s", event)
        return record

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def read_events(path: Path, *, limit: int | None = None) -> list[dict[str, Any]]:
    """Reads events back (the last `limit` ones), skipping lines that are not valid JSON."""
    try:
        with path.open("rb") as handle:
            if limit is not None:
                handle.seek(max(0, path.stat().st_size - limit * 1024))
            lines = handle.read().splitlines()
    except FileNotFoundError:
        return []
    events = []
    for raw in lines:
        try:
            events.append(json.loads(raw))
        except ValueError:
            continue
    return events[-limit:] if limit is not None else events


def now_ms() -> int:
    """Wall-clock milliseconds, as payload timestamps use."""
    return time.time_ns() // 1_000_000
