"""Remembers which messages were answered, so a repeated delivery of one is skipped, not answered twice."""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any

from gateway.home import atomic_write
from gateway.models import IncomingPayload
from gateway.payloads import message_identity


def answered_before(path: Path, message: IncomingPayload, before_s: float) -> bool:
    """Whether the file of answered identities says `message`'s was last answered before `before_s` (a time
    as time.time()); read whole, without the index's lock: for `send --wait`, not for the worker."""
    key = message_identity(message)
    needle = json.dumps(key).encode()  # as AnsweredIndex writes it: lines without it are not parsed
    try:
        lines = [line for line in path.read_bytes().splitlines() if needle in line]
    except FileNotFoundError:
        return False
    stamp = None
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("k") == key:
            stamp = None if record.get("forget") else record.get("t")
    return isinstance(stamp, int | float) and stamp < before_s


class AnsweredIndex:
    """An append-only file of answered message identities, kept for `window_sec`.

    Only answers are recorded (never claims), so a message that is retried or recovered after a
    crash is not mistaken for a duplicate of itself; one whose answer was already written is.

    Processes sharing a home share the file: each reads what the others appended before it answers
    `contains` or writes, and follows the file when a starting process compacts it (a new file in its
    place), so no process misses another's answers nor writes its own where nobody reads them. The
    compaction holds `.answered.lock` beside the file exclusively and writers hold it shared, so no
    line is written to the file being replaced.
    """

    def __init__(self, path: Path, *, window_sec: float, fsync: bool = True):
        self.path = path
        self._name = os.fspath(path)  # stat()ed before every look: a str is quicker than a Path
        self.window_sec = window_sec
        self.fsync = fsync
        self._seen: dict[str, float] = {}
        self._fd = -1
        self._lock_fd = -1
        self._file: tuple[int, int] = (0, 0)  # (device, inode) of the file `_fd` is open on
        self._read_to = 0  # bytes of that file applied to `_seen`

    def open(self) -> None:
        """Loads the identities still inside the window and compacts the file."""
        self._lock_fd = os.open(self.path.with_name(f".{self.path.stem}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        try:
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                data = b""
            lines = data.splitlines()
            self._apply(lines)
            if len(self._seen) < len(lines):
                data = "".join(json.dumps({"k": k, "t": t}) + "\n" for k, t in self._seen.items()).encode()
                atomic_write(self.path, data, fsync=self.fsync)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            self._file, self._read_to = _identity(os.fstat(self._fd)), len(data)
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        self._catch_up()

    def _apply(self, lines: list[bytes]) -> None:
        cutoff = time.time() - self.window_sec
        for line in lines:
            try:
                record = json.loads(line)
                if record.get("forget"):
                    self._seen.pop(record["k"], None)
                elif record["t"] >= cutoff:
                    self._seen[record["k"]] = record["t"]
            except (ValueError, KeyError, TypeError):
                continue

    def _catch_up(self) -> None:
        """Applies the lines other processes appended since the last look; after a compaction by another
        process, reopens the new file and reads it whole (it holds every identity still in the window)."""
        if self._fd < 0:
            return
        try:
            status = os.stat(self._name)
        except FileNotFoundError:
            status = None
        if status is None or _identity(status) != self._file:
            os.close(self._fd)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            status = os.fstat(self._fd)
            self._file, self._read_to = _identity(status), 0
            self._seen.clear()
        size = status.st_size
        if size <= self._read_to:
            return
        tail = os.pread(self._fd, size - self._read_to, self._read_to)
        whole = tail[:tail.rfind(b"\n") + 1]  # a line still being written is read next time
        self._read_to += len(whole)
        self._apply(whole.splitlines())

    def contains(self, message: IncomingPayload) -> bool:
        self._catch_up()
        stamp = self._seen.get(message_identity(message))
        return stamp is not None and stamp >= time.time() - self.window_sec

    def _append(self, record: dict[str, Any]) -> None:
        fcntl.flock(self._lock_fd, fcntl.LOCK_SH)
        try:
            self._catch_up()  # written to the file every process reads, never to one being replaced
            line = (json.dumps(record) + "\n").encode()
            os.write(self._fd, line)
            if os.lseek(self._fd, 0, os.SEEK_CUR) == self._read_to + len(line):
                self._read_to += len(line)  # nobody else wrote meanwhile: no need to read our own line back
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        if self.fsync:
            os.fdatasync(self._fd)

    def record(self, message: IncomingPayload) -> None:
        """Records that `message` was answered (its replies are already on disk)."""
        key, stamp = message_identity(message), time.time()
        self._append({"k": key, "t": stamp})
        self._seen[key] = stamp

    def forget(self, message: IncomingPayload) -> None:
        """Counts `message` as unanswered again (its answer was an ack and its work then failed: it is a
        dead letter now, which `dead retry` must run, not skip as a duplicate)."""
        key = message_identity(message)
        self._catch_up()
        if key not in self._seen:
            return
        self._append({"k": key, "t": time.time(), "forget": True})
        self._seen.pop(key, None)

    def close(self) -> None:
        for fd in (self._fd, self._lock_fd):
            if fd >= 0:
                os.close(fd)
        self._fd = self._lock_fd = -1


def _identity(status: os.stat_result) -> tuple[int, int]:
    return status.st_dev, status.st_ino
