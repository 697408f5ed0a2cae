"""UsageRecords on the file backend: one file of totals per day, `<home>/queue/state/usage/<YYYY-MM-DD>.json`,
holding {kind: {key: [usd, tokens_in, tokens_out, turns, seconds]}}.

Every change is a read-modify-write of day files under one flock (`state/usage/.lock`) and an atomic rewrite,
so the adds of any number of processes and threads sharing the home are each counted once. Reads take no lock:
a day file is always whole, and a parsed day is kept until its file changes (its inode, mtime and size; a day
changed within SETTLED_NS is parsed each time), so a month's limits cost ~31 stats. A day file that cannot be
parsed is logged and moved aside as `.bad` (under the lock, after reading it again there). Days with nothing
leave no file; a day file older than RETENTION_DAYS is removed when a new day's file is created.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from datetime import date, timedelta
from pathlib import Path

from gateway.home import Home, atomic_write
from orchestrator.usage import Spent, ordered

log = logging.getLogger("switchyard.orchestrator.usage")

RETENTION_DAYS = 400
SETTLED_NS = 1_000_000_000
"""A day file is cached only once it has been left alone this long: the file clock ticks coarsely (4 ms here) and a
rewrite may reuse the inode it replaced, so a file rewritten within one tick at the same size would look unchanged
(git's "racy" index entries)."""
Day = dict[str, dict[str, Spent]]


class UnreadableDay(ValueError):
    """A day file that is not a day's totals."""


def _parse(data: bytes) -> Day:
    body = json.loads(data)
    if not isinstance(body, dict):
        raise UnreadableDay("not an object")
    day: Day = {}
    for kind, keys in body.items():
        if not isinstance(keys, dict):
            raise UnreadableDay(f"{kind}: not an object")
        day[kind] = {}
        for key, row in keys.items():
            if not (isinstance(row, list) and len(row) == 5):
                raise UnreadableDay(f"{kind}/{key}: not [usd, tokens_in, tokens_out, turns, seconds]")
            usd, tokens_in, tokens_out, turns, seconds = row
            day[kind][key] = Spent(float(usd), int(tokens_in), int(tokens_out), int(turns), float(seconds))
    return day


def _dump(day: Day) -> bytes:
    return json.dumps({kind: {key: [s.usd, s.tokens_in, s.tokens_out, s.turns, s.seconds]
                              for key, s in keys.items()} for kind, keys in day.items() if keys}).encode()


def _date(name: str) -> date | None:
    if not name.endswith(".json"):
        return None
    try:
        return date.fromisoformat(name[:-5])
    except ValueError:
        return None


class FileUsageRecords:
    """Per-day usage totals of one home, shared by every process on it."""

    def __init__(self, home: Home, fsync: bool = True):
        self.root = home.state / "usage"
        self.fsync = fsync
        self._cache: dict[str, tuple[tuple[int, int, int], Day]] = {}
        self._cache_lock = threading.Lock()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _path(self, day: date) -> Path:
        return self.root / f"{day.isoformat()}.json"

    def _days(self, first: date, last: date) -> list[date]:
        """The days from `first` to `last` that have a file, oldest first."""
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return []
        return sorted(day for name in names if (day := _date(name)) is not None and first <= day <= last)

    def _read_locked(self, path: Path) -> Day:
        """The day at `path` read from disk (the lock held): {} when absent; moved aside when unreadable."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return {}
        try:
            return _parse(data)
        except (ValueError, TypeError) as exc:
            bad = path.with_name(f"{path.name}.{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}.bad")
            log.warning("usage: %s cannot be read (%s); moved aside to %s, its totals are lost", path, exc, bad.name)
            os.replace(path, bad)
            return {}

    def _read(self, day: date) -> Day:
        """The day's totals (no lock: a day file is always whole), parsed again only when its file changed."""
        path = self._path(day)
        try:
            stat = path.stat()
        except FileNotFoundError:
            return {}
        stamp = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        with self._cache_lock:
            cached = self._cache.get(path.name)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        try:
            parsed = _parse(path.read_bytes())
        except FileNotFoundError:
            return {}
        except (ValueError, TypeError):
            with self._locked():
                parsed = self._read_locked(path)
            return parsed
        if time.time_ns() - stat.st_mtime_ns > SETTLED_NS:
            with self._cache_lock:
                self._cache[path.name] = (stamp, parsed)
        return parsed

    def _write_locked(self, day: date, totals: Day) -> None:
        path = self._path(day)
        if any(totals.values()):
            atomic_write(path, _dump(totals), fsync=self.fsync)
        else:
            path.unlink(missing_ok=True)

    def add(self, day: date, keys: Mapping[str, str], spent: Spent) -> None:
        if not keys:
            return
        with self._locked():
            path = self._path(day)
            new = not path.exists()
            totals = self._read_locked(path)
            for kind, key in keys.items():
                row = totals.setdefault(kind, {})
                row[key] = row.get(key, Spent()) + spent
            self._write_locked(day, totals)
            if new:
                self._forget_old(day - timedelta(days=RETENTION_DAYS))

    def _forget_old(self, before: date) -> None:
        for day in self._days(date.min, before - timedelta(days=1)):
            self._path(day).unlink(missing_ok=True)

    def totals(self, kind: str, key: str, first: date, last: date) -> Spent:
        return sum((self._read(day).get(kind, {}).get(key, Spent()) for day in self._days(first, last)), Spent())

    def table(self, kind: str, first: date, last: date) -> list[tuple[str, Spent]]:
        rows: dict[str, Spent] = {}
        for day in self._days(first, last):
            for key, spent in self._read(day).get(kind, {}).items():
                rows[key] = rows.get(key, Spent()) + spent
        return ordered(rows)

    def reset(self, kind: str, key: str | None, first: date, last: date) -> int:
        forgotten = 0
        with self._locked():
            for day in self._days(first, last):
                totals = self._read_locked(self._path(day))
                keys = totals.get(kind, {})
                gone = list(keys) if key is None else [key] if key in keys else []
                for name in gone:
                    del keys[name]
                if gone:
                    forgotten += len(gone)
                    self._write_locked(day, totals)
        return forgotten
