"""The structured event log: `logs/events.jsonl`, one JSON object a line."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.storable import made_safe, storable
from gateway.telemetry.tracing import current_ids

if TYPE_CHECKING:  # for annotations only: `status` reads the clock without loading asyncio
    import asyncio

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
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._pending: list[bytes] = []
        self._dropped = 0
        self._dropped_reason = ""
        self._torn = False

    def write_per_turn(self, loop: asyncio.AbstractEventLoop) -> None:
        """Lets lines emitted on `loop`'s thread be written together when the loop's current turn
        ends: one system call instead of one per event (a message makes four). Other threads, and
        any time the loop is not running, still write at once. `close()` writes what is left."""
        self._loop = loop
        self._loop_thread = threading.get_ident()

    def observe(self, observer: Observer) -> None:
        """Adds an observer told of every event from now on (it must be quick and may run on any thread)."""
        self._observers.append(observer)

    def add_secret(self, value: str) -> None:
        """Registers a value that must never appear in the log (a token, a signing secret)."""
        if len(value) >= 4 and value not in self._secrets:
            self._secrets.append(value)

    def redact(self, text: str) -> str:
        """Masks every registered secret in `text`."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        """Writes one event with `ts` and `event` plus the given fields (None values left out)."""
        record = {"ts": utc_now_iso(), "event": event}
        record.update({k: v for k, v in fields.items() if v is not None})
        if (ids := current_ids()) is not None:  # telemetry on, inside a message's trace
            record.setdefault("trace_id", ids[0])
        text = json.dumps(record, default=str, ensure_ascii=False)
        if not storable(text):  # a NUL or a lone surrogate (a file's name, an error's text): made safe
            record = made_safe(json.loads(text))
            text = json.dumps(record, ensure_ascii=False)
        self._append((self.redact(text) + "\n").encode())
        for observer in self._observers:
            try:
                observer(record)
            except Exception:
                log.exception("event observer failed for %s", event)
        return record

    def _append(self, line: bytes) -> None:
        """Queues a line of the loop's thread for the end of its turn; a line of any other thread is
        written at once, after the loop's queued lines (emitted before it), so the log keeps their order."""
        loop = self._loop
        with self._lock:
            if loop is not None and threading.get_ident() == self._loop_thread and loop.is_running():
                self._pending.append(line)
                if len(self._pending) == 1:
                    loop.call_soon(self.flush)
                return
            if self._pending:
                line = b"".join(self._pending) + line
                self._pending.clear()
            self._write(line)

    def flush(self) -> None:
        """Writes the lines waiting for the end of the loop's turn."""
        with self._lock:
            if self._pending:
                data = b"".join(self._pending)
                self._pending.clear()
                self._write(data)

    def _write(self, data: bytes) -> None:
        """Appends whole lines or none; lines a failed write lost are counted into the next write as
        an `events.dropped` line."""
        lines = data.count(b"\n")
        if self._dropped:
            data = self._dropped_line() + data
        try:
            self._append_whole(data)
        except OSError as exc:
            if not self._dropped:
                log.error("cannot write event log %s: %s", self.path, exc)
            self._dropped += lines
            self._dropped_reason = str(exc)
            return
        self._dropped = 0
        self._torn = False

    def _dropped_line(self) -> bytes:
        record = {"ts": utc_now_iso(), "event": "events.dropped", "count": self._dropped,
                  "reason": self._dropped_reason}
        torn = b"\n" if self._torn else b""  # ends a fragment that could not be taken back
        return torn + json.dumps(record).encode() + b"\n"

    def _append_whole(self, data: bytes) -> None:
        """Writes all of `data`, or, when a write fails part-way (a full disk), takes back what it wrote."""
        view = memoryview(data)
        written = 0
        try:
            while written < len(data):
                written += os.write(self._fd, view[written:])
        except OSError:
            if written:
                self._take_back(written)
            raise

    def _take_back(self, written: int) -> None:
        """Truncates the last `written` bytes we appended, unless another writer appended after them."""
        try:
            end = os.lseek(self._fd, 0, os.SEEK_CUR)  # O_APPEND: just after our last byte
            if os.fstat(self._fd).st_size == end:
                os.ftruncate(self._fd, end - written)
                return
        except OSError:
            pass
        self._torn = True

    def close(self) -> None:
        self.flush()
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
