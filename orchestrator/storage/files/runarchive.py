"""Settled runs kept as lines of per-day logs, with an index that lists the newest without reading the rest.

`runs/.archive/<day>.jsonl` holds one line per run (its final state and its events); `<day>.idx` one
fixed-width record per line (id, created, archived, state, where the line is), in the order the lines
were written. The day is the one in the run's id (the day its message was sent), so a run is found by id in
one day's index. Within a file the `archived` stamps never go down (each is taken under the file's lock),
and a run is created before it is archived: reading the indexes from their ends gives the newest runs
after a few records, however many are kept.

Crash safety: a line is written (and fsynced, when the store fsyncs) before its record, and the run's
folder is removed only after both; the index is checked against its log under the log's lock before each
write and before it is read, so records a crash left out are added from the log, a torn record or line is
cut off, and a missing or corrupt index is rebuilt from the log. The log is the truth, the index only says
where to look: it never lists a run the log does not hold, nor misses one it holds.
"""

from __future__ import annotations

import contextlib
import fcntl
import heapq
import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from gateway.home import fsync_dir
from gateway.telemetry.events import utc_now_iso

ARCHIVE_DIR = ".archive"  # under runs/: hidden, so never taken for a run's folder
RECORD = 256  # bytes of one index record, its newline included
CHUNK_RECORDS = 64  # records read at once from the end of an index
SEEN_DAYS = 4  # days whose index `find` keeps read in memory
_ID_PREFIX = b'{"id":"'  # how a record starts (`_record`)
_DAY_IN_ID = re.compile(r"r-(\d{4})(\d{2})(\d{2})-")


@dataclass(frozen=True)
class Entry:
    """One index record: a settled run and where its line is."""

    run_id: str
    created: str
    archived: str
    state: str
    day: str
    offset: int
    length: int


class CorruptIndex(Exception):
    """An index record that is not one: the index is rebuilt from its log."""


def day_of(run_id: str, created: str | None = None) -> str | None:
    """The day a run is kept under: the date in its id (`r-YYYYMMDD-…`), else the date it was created."""
    match = _DAY_IN_ID.match(run_id)
    if match:
        return "-".join(match.groups())
    return created[:10] if created and re.fullmatch(r"\d{4}-\d{2}-\d{2}", created[:10]) else None


class RunArchive:
    """The logs and indexes of settled runs under `runs/.archive/`."""

    def __init__(self, runs_root: Path, *, fsync: bool):
        self.root = runs_root / ARCHIVE_DIR
        self._fsync = fsync
        # day → ((its index's inode, first record), bytes of it read, where each id's record is)
        self._seen: dict[str, tuple[tuple[int, bytes], int, dict[str, int]]] = {}

    def _log(self, day: str) -> Path:
        return self.root / f"{day}.jsonl"

    def _index(self, day: str) -> Path:
        return self.root / f"{day}.idx"

    def days(self) -> list[str]:
        """The days that have a log, oldest first."""
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return []
        return sorted(name[:-6] for name in names if name.endswith(".jsonl"))

    # --- writing ---------------------------------------------------------------------------------------

    def add(self, run_id: str, created: str, state: str, line: bytes) -> None:
        """Appends one settled run's line (`{"run": …, "events": […]}` and a newline) and its record."""
        day = day_of(run_id, created) or "undated"
        self.root.mkdir(parents=True, exist_ok=True)
        with self._locked(day) as log_fd:
            end = self._repair(day, log_fd)
            os.write(log_fd, line)
            if self._fsync:
                os.fsync(log_fd)
                if end == 0:  # a new log: its name must last too
                    fsync_dir(self.root)
            entry = Entry(run_id, created, utc_now_iso(), state, day, end, len(line))
            self._append_records(day, [entry])

    @contextlib.contextmanager
    def _locked(self, day: str) -> Iterator[int]:
        """The day's log, open for appending, under an exclusive lock (every process sharing the home)."""
        fd = os.open(self._log(day), os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield fd
        finally:
            os.close(fd)  # releases the lock

    def _append_records(self, day: str, entries: list[Entry]) -> None:
        fd = os.open(self._index(day), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, b"".join(_record(entry) for entry in entries))
        finally:
            os.close(fd)

    def _repair(self, day: str, log_fd: int) -> int:
        """Makes the day's index cover its log exactly (the log's lock held); returns the log's size."""
        size = os.fstat(log_fd).st_size
        index = self._index(day)
        try:
            with open(index, "rb") as handle:  # its last record only: the index may be long
                index_size = os.fstat(handle.fileno()).st_size
                whole = index_size - index_size % RECORD
                handle.seek(max(0, whole - RECORD))
                last = _parse(handle.read(RECORD), day) if whole else None
        except (FileNotFoundError, CorruptIndex):
            index_size, whole, last = 0, 0, None
            index.unlink(missing_ok=True)
        if whole != index_size:  # a torn record: cut off
            os.truncate(index, whole)
        covered = last.offset + last.length if last is not None else 0
        if covered > size:  # the index names lines the log lost: rebuilt from the log alone
            index.unlink(missing_ok=True)
            covered = 0
        if covered == size:
            return size
        entries, good_end = _scan(day, _read_at(log_fd, covered, size - covered), covered)
        if entries:
            self._append_records(day, entries)
        if good_end < size:  # a torn last line (its run is still in its folder): cut off
            os.ftruncate(log_fd, good_end)
        return good_end

    def _checked(self, day: str) -> None:
        """Repairs the day's index when it does not end where its log ends (a crash, or it is missing)."""
        try:
            log_size = os.stat(self._log(day)).st_size
            index_size = os.stat(self._index(day)).st_size
        except FileNotFoundError:
            if not self._log(day).exists():  # an index left by a removal cut short: nothing to point at
                self._index(day).unlink(missing_ok=True)
                return
            index_size = -1
        if index_size >= RECORD and index_size % RECORD == 0:
            with open(self._index(day), "rb") as handle:
                handle.seek(index_size - RECORD)
                with contextlib.suppress(CorruptIndex):
                    last = _parse(handle.read(RECORD), day)
                    if last.offset + last.length == log_size:
                        return
        if log_size == 0 and index_size <= 0:
            return
        with self._locked(day) as log_fd:
            self._repair(day, log_fd)

    # --- reading ---------------------------------------------------------------------------------------

    def backwards(self, day: str, *, check: bool = True) -> Iterator[Entry]:
        """The day's records, the last written first (`check`: its index repaired first if it must be)."""
        if check:
            self._checked(day)
        try:
            handle = open(self._index(day), "rb")  # noqa: SIM115 (closed below, also on GeneratorExit)
        except FileNotFoundError:
            return
        try:
            end = os.fstat(handle.fileno()).st_size // RECORD * RECORD
            while end > 0:
                start = max(0, end - RECORD * CHUNK_RECORDS)
                handle.seek(start)
                chunk = handle.read(end - start)
                for at in range(len(chunk) - RECORD, -1, -RECORD):
                    yield self._entry(chunk[at:at + RECORD], day)
                end = start
        finally:
            handle.close()

    def _entry(self, raw: bytes, day: str) -> Entry:
        try:
            return _parse(raw, day)
        except CorruptIndex:  # rebuilt at once from its log; this reading stops here
            self._index(day).unlink(missing_ok=True)
            self._checked(day)
            raise

    def count(self) -> int:
        """How many runs the archive holds."""
        total = 0
        for day in self.days():
            self._checked(day)
            with contextlib.suppress(FileNotFoundError):
                total += os.stat(self._index(day)).st_size // RECORD
        return total

    def top(self, limit: int, key: Callable[[Entry], tuple[str, str]], keep: Callable[[Entry], bool],
            floor: str = "") -> tuple[list[Entry], int | None]:
        """The `limit` kept entries with the largest `key` (whose first part is never after `archived`),
        largest first, and how many entries are kept in all (None when not counted: the reading stopped
        once nothing older could get in). `limit` 0: every one, counted. Entries archived before `floor`
        are never kept (their keys are older): the reading stops there."""
        chosen: dict[str, Entry] = {}
        best: list[tuple[str, str]] = []  # the `limit` largest keys, the smallest first (a heap)
        counted = 0
        bounds = []
        for day in self.days():
            last = next(self.backwards(day), None)
            if last is not None:
                bounds.append((last.archived, day))
        for bound, day in sorted(bounds, reverse=True):
            if limit and len(best) >= limit and best[0][0] > bound:
                return _ordered(chosen, limit, key), None
            if bound < floor:
                break
            for entry in self.backwards(day):
                if limit and len(best) >= limit and best[0][0] > entry.archived or entry.archived < floor:
                    break
                if entry.run_id in chosen or not keep(entry):
                    continue
                chosen[entry.run_id] = entry
                counted += 1
                if limit:
                    (heapq.heappush if len(best) < limit else heapq.heappushpop)(best, key(entry))
        return _ordered(chosen, limit, key), (counted if not limit or len(best) < limit else None)

    def find(self, run_id: str, *, again: bool = True) -> Entry | None:
        """The record of a run, by id (the last one, should a run have been archived twice). A day's index
        is read once, then only what was appended to it since (every message asks for its run's id)."""
        day = day_of(run_id)
        for candidate in [day] if day else reversed(self.days()):
            self._checked(candidate)
            try:
                with open(self._index(candidate), "rb") as handle:
                    at = self._ids(candidate, handle).get(run_id)
                    if at is None:
                        continue
                    handle.seek(at)
                    entry = self._entry(handle.read(RECORD), candidate)
            except FileNotFoundError:
                continue
            if entry.run_id == run_id:
                return entry
            self._seen.pop(candidate, None)  # the index was rebuilt differently: read it whole again
            return self.find(run_id, again=False) if again else None
        return None

    def _ids(self, day: str, handle: IO[bytes]) -> dict[str, int]:
        """Where each run id's last record is in the day's index, read on from where the last call stopped
        (from the start when the file is another one, or shorter: rebuilt or pruned)."""
        status = os.fstat(handle.fileno())
        first = os.pread(handle.fileno(), RECORD, 0)  # with the inode, tells another file of the same name
        known, read, ids = self._seen.pop(day, ((status.st_ino, first), 0, {}))
        if known != (status.st_ino, first) or read > status.st_size:
            read, ids = 0, {}
        end = status.st_size // RECORD * RECORD
        if end > read:
            handle.seek(read)
            data = handle.read(end - read)
            for at in range(0, len(data), RECORD):
                record = data[at:at + RECORD]
                raw = record[len(_ID_PREFIX):record.find(b'"', len(_ID_PREFIX))]
                if record.startswith(_ID_PREFIX) and b"\\" not in raw:
                    ids[raw.decode()] = read + at
                else:  # an escaped id (or not a record: `find` reads it, and the index is rebuilt)
                    with contextlib.suppress(ValueError, KeyError, TypeError):
                        ids[str(json.loads(record)["id"])] = read + at
            read = end
        self._seen[day] = ((status.st_ino, first), read, ids)
        while len(self._seen) > SEEN_DAYS:  # the days looked up last are kept
            del self._seen[next(iter(self._seen))]
        return ids

    def line(self, entry: Entry) -> dict[str, Any] | None:
        """A settled run's line: `{"run": …, "events": […]}` (None: it cannot be read)."""
        try:
            with open(self._log(entry.day), "rb") as handle:
                handle.seek(entry.offset)
                data = json.loads(handle.read(entry.length))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    # --- retention -------------------------------------------------------------------------------------

    def prune(self, cutoff: str) -> list[str]:
        """Removes each day whose runs were all archived before `cutoff` (UTC ISO); their run ids."""
        removed: list[str] = []
        for day in self.days():
            last = next(self.backwards(day), None)
            if last is None or last.archived >= cutoff:
                continue
            with self._locked(day) as log_fd:  # no run is added to it meanwhile
                self._repair(day, log_fd)
                entries = list(self.backwards(day, check=False))
                if entries and entries[0].archived < cutoff:
                    self._index(day).unlink(missing_ok=True)  # first: a log left alone is indexed again
                    self._log(day).unlink(missing_ok=True)
                    removed += [entry.run_id for entry in reversed(entries)]
        return removed


def _record(entry: Entry) -> bytes:
    text = json.dumps({"id": entry.run_id, "c": entry.created, "a": entry.archived, "s": entry.state,
                       "o": entry.offset, "n": entry.length}, ensure_ascii=True, separators=(",", ":"))
    if len(text) >= RECORD:
        raise ValueError(f"run id {entry.run_id!r} is too long for the run archive's index")
    return text.encode().ljust(RECORD - 1) + b"\n"


def _parse(raw: bytes, day: str) -> Entry:
    try:
        data = json.loads(raw)
        return Entry(str(data["id"]), str(data["c"]), str(data["a"]), str(data["s"]), day, int(data["o"]),
                     int(data["n"]))
    except (ValueError, KeyError, TypeError):
        raise CorruptIndex(f"run archive {day}: an index record is not one") from None


def _read_at(fd: int, offset: int, length: int) -> bytes:
    return os.pread(fd, length, offset) if length > 0 else b""


def _scan(day: str, data: bytes, base: int) -> tuple[list[Entry], int]:
    """The records of the complete lines of `data` (read from `base` in the log) and where they end; a line
    that is not a run's is skipped (its bytes stay, unindexed)."""
    entries = []
    at = 0
    while (end := data.find(b"\n", at)) >= 0:
        with contextlib.suppress(ValueError, KeyError, TypeError):
            run = json.loads(data[at:end])["run"]
            entries.append(Entry(str(run["runId"]), str(run.get("createdAt") or ""), str(run.get("updatedAt") or ""),
                                 str(run.get("state") or ""), day, base + at, end + 1 - at))
        at = end + 1
    return entries, base + at


def _ordered(chosen: dict[str, Entry], limit: int, key: Callable[[Entry], tuple[str, str]]) -> list[Entry]:
    ordered = sorted(chosen.values(), key=key, reverse=True)
    return ordered[:limit] if limit else ordered
