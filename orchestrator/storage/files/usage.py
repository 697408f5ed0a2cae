"""UsageRecords on the file backend: one append-only log per day, `<home>/queue/state/usage/<YYYY-MM-DD>.log`.

A turn is one line appended with O_APPEND — `{"keys": {kind: key, ...}, "spent": [usd, tokens_in, tokens_out,
turns, seconds]}` — in a single write, so the turns of every process and thread sharing the home are each counted
once, with no lock and no rewrite: counting a turn costs one write. A reset is a line too (`{"reset": kind, "key":
key or null}`): what its key spent before it that day no longer counts. Each line is written as `\\n<json>\\n`, so a
line torn by a crash is skipped (and logged) without spoiling the next.

Reads keep each day's totals with how far they have read, and read only what was appended since (a log replaced or
shortened is read again from its start), so checking a month's limits costs ~31 stats and the new lines. The logs
are not fsynced: a count is not a message; a process that crashes loses none (the page cache holds them), a
machine that loses power may lose the last moments' counts. Days with nothing leave no log; a log older than
RETENTION_DAYS is removed when a new day's log is made.

The turns running now are `running.json` beside the logs — token → its keys, its holder (`<host>:<pid>:…`) and
its expiry (epoch seconds) — read and rewritten (by a rename) only under an exclusive flock(2) of `running.lock`,
which every thread and process of the home takes for its own open file: a reservation's check and its write are
one step for all of them. A reservation whose holder is a process of this machine that is gone, or whose expiry
passed, counts no more and is dropped at the next write.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from gateway.disk.locks import process_instance
from gateway.home import Home, atomic_write
from orchestrator.usage.records import Admit, Spent, holder_gone, new_token, ordered

log = logging.getLogger("switchyard.orchestrator.usage")

RETENTION_DAYS = 400
SUFFIX = ".log"
RUNNING, RUNNING_LOCK = "running.json", "running.lock"
Totals = dict[str, dict[str, Spent]]
"""kind → key → what it spent (one day's, as far as its log was read)."""
Reservations = dict[str, dict[str, Any]]
"""token → {"keys": {kind: key}, "holder": …, "expires": epoch seconds}: the turns running now."""


@dataclass
class _Read:
    """How far one day's log was read, and its totals up to there."""

    inode: int
    offset: int = 0
    totals: Totals = field(default_factory=dict)


class FileUsageRecords:
    """Per-day usage totals of one home, shared by every process on it (never fsynced: see the module's
    docstring)."""

    def __init__(self, home: Home, *, holder: str | None = None):
        self.root = home.state / "usage"
        self.holder = holder or process_instance()  # whose reservations this handle makes
        self._read: dict[str, _Read] = {}
        self._lock = threading.Lock()

    def _path(self, day: date) -> Path:
        return self.root / f"{day.isoformat()}{SUFFIX}"

    def _days(self, first: date, last: date) -> list[date]:
        """The days from `first` to `last` that have a log, oldest first."""
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return []
        return sorted(day for name in names if (day := _date(name)) is not None and first <= day <= last)

    def _append(self, day: date, record: dict[str, object]) -> None:
        """Appends one line to the day's log in a single write; a new day's log prunes the old ones."""
        line = b"\n" + json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        path = self._path(day)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            new = False
        except FileNotFoundError:
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            new = True
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        if new:
            self._forget_old(day - timedelta(days=RETENTION_DAYS))

    def _forget_old(self, before: date) -> None:
        for day in self._days(date.min, before - timedelta(days=1)):
            self._path(day).unlink(missing_ok=True)

    def _totals(self, day: date) -> Totals:
        """The day's totals, reading only what was appended since the last read."""
        path = self._path(day)
        with self._lock:
            try:
                with open(path, "rb") as log_file:
                    inode = os.fstat(log_file.fileno()).st_ino
                    read = self._read.get(path.name)
                    if read is None or read.inode != inode or os.fstat(log_file.fileno()).st_size < read.offset:
                        read = self._read[path.name] = _Read(inode)
                    log_file.seek(read.offset)
                    data = log_file.read()
            except FileNotFoundError:
                self._read.pop(path.name, None)
                return {}
            whole = data.rfind(b"\n") + 1  # a line still being written is read next time
            for line in data[:whole].split(b"\n"):
                if line.strip():
                    _apply(read.totals, line, path)
            read.offset += whole
            return read.totals

    def add(self, day: date, keys: Mapping[str, str], spent: Spent) -> None:
        spent, _ = spent.counted()
        if keys:
            self._append(day, {"keys": dict(keys), "spent": [spent.usd, spent.tokens_in, spent.tokens_out,
                                                             spent.turns, spent.seconds]})

    def totals(self, kind: str, key: str, first: date, last: date) -> Spent:
        return sum((self._totals(day).get(kind, {}).get(key, Spent()) for day in self._days(first, last)), Spent())

    def table(self, kind: str, first: date, last: date) -> list[tuple[str, Spent]]:
        rows: dict[str, Spent] = {}
        for day in self._days(first, last):
            for key, spent in self._totals(day).get(kind, {}).items():
                rows[key] = rows.get(key, Spent()) + spent
        return ordered(rows)

    def reset(self, kind: str, key: str | None, first: date, last: date) -> int:
        forgotten = 0
        for day in self._days(first, last):
            spent = self._totals(day).get(kind, {})
            gone = len(spent) if key is None else int(key in spent)
            if gone:
                self._append(day, {"reset": kind, "key": key})
                forgotten += gone
        return forgotten


    def running(self, kind: str, key: str) -> int:
        return _count(self._reservations(), kind, key)

    def reserve(self, keys: Mapping[str, str], admit: Admit, ttl_s: float) -> str:
        with self._locked_reservations() as reservations:
            admit(_Ledger(self, reservations))
            token = new_token()
            reservations[token] = {"keys": dict(keys), "holder": self.holder, "expires": time.time() + ttl_s}
            return token

    def renew(self, token: str, ttl_s: float) -> None:
        with self._locked_reservations() as reservations:
            if token in reservations:
                reservations[token]["expires"] = time.time() + ttl_s

    def release(self, token: str) -> None:
        with self._locked_reservations() as reservations:
            reservations.pop(token, None)

    @contextmanager
    def _locked_reservations(self) -> Iterator[Reservations]:
        """The live reservations under the home's exclusive lock, written back (by a rename) when the block ends
        without an error."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / RUNNING_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # released by the close, and by the kernel if this process dies
            reservations = self._reservations()
            yield reservations
            atomic_write(self.root / RUNNING, json.dumps(reservations, separators=(",", ":")).encode(), fsync=False)
        finally:
            os.close(fd)

    def _reservations(self) -> Reservations:
        """The reservations of `running.json` that still count (an unreadable file: none, logged)."""
        try:
            found = json.loads((self.root / RUNNING).read_bytes())
        except FileNotFoundError:
            return {}
        except ValueError as exc:
            log.warning("usage: %s cannot be read (%s); no turn counts as running", self.root / RUNNING, exc)
            return {}
        now = time.time()
        return {token: each for token, each in found.items() if _live(each, now)} if isinstance(found, dict) else {}


class _Ledger:
    """A reservation's view of the totals and of the reservations it is about to change."""

    def __init__(self, records: FileUsageRecords, reservations: Reservations):
        self._records, self._reservations = records, reservations

    def totals(self, kind: str, key: str, first: date, last: date) -> Spent:
        return self._records.totals(kind, key, first, last)

    def running(self, kind: str, key: str) -> int:
        return _count(self._reservations, kind, key)


def _live(reservation: Any, now: float) -> bool:
    """Whether a reservation read from `running.json` still counts: whole, not expired, its holder not gone."""
    try:
        return (isinstance(reservation["keys"], dict) and float(reservation["expires"]) > now
                and not holder_gone(str(reservation["holder"])))
    except (TypeError, KeyError, ValueError):
        return False


def _count(reservations: Reservations, kind: str, key: str) -> int:
    return sum(1 for each in reservations.values() if each["keys"].get(kind) == key)


def _apply(totals: Totals, line: bytes, path: Path) -> None:
    """Adds one line of a day's log to its totals; a line that is none (torn by a crash) is logged and skipped."""
    try:
        record = json.loads(line)
        if "reset" in record:
            kind, key = str(record["reset"]), record["key"]
            if key is None:
                totals.pop(kind, None)
            else:
                totals.get(kind, {}).pop(str(key), None)
            return
        spent, invalid = Spent(*record["spent"]).counted()
        if invalid:
            log.warning("usage: a line of %s holds figures that are no amount (%s); they are not counted", path,
                        ", ".join(f"{field} {raw}" for field, raw in invalid))
        for kind, key in record["keys"].items():
            row = totals.setdefault(str(kind), {})
            row[str(key)] = row.get(str(key), Spent()) + spent
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        log.warning("usage: a line of %s cannot be read (%s); it is not counted", path, exc)


def _date(name: str) -> date | None:
    if not name.endswith(SUFFIX):
        return None
    try:
        return date.fromisoformat(name.removesuffix(SUFFIX))
    except ValueError:
        return None
