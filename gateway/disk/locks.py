"""Locks on disk and who holds them: a process's own folder (a worker's in processing/) held by an flock on its
`.lock`, and the lock of a dead process's folder taken to clean it up; the TTL lock files of
`coordination/locks/` (spec 001: one holder per resource across the processes sharing a home); and a process's
name as a holder (`<host>:<pid>[:<start ns>]`, as lock files, database leases and claims record it)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import socket
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gateway.disk.names import safe_name

FOLDER_LOCK_ATTEMPTS = 200
FOLDER_LOCK_PAUSE_S = 0.005  # while another process checks a folder it found unlocked (milliseconds)


def take_folder_lock(folder: Path) -> int:
    """Creates a process's own folder (a worker's in processing/) and takes its `.lock`; returns the
    lock's descriptor, held until closed. A process cleaning up after dead ones may hold that lock a
    moment, or remove the folder just made (it looked like a dead process's, see `lock_if_unheld`):
    then again, until the lock held is the one in the folder."""
    for attempt in range(FOLDER_LOCK_ATTEMPTS):
        folder.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if attempt == FOLDER_LOCK_ATTEMPTS - 1:
                raise
            time.sleep(FOLDER_LOCK_PAUSE_S)
            continue
        if _same_file(fd, folder / ".lock"):
            return fd
        os.close(fd)
    raise OSError(f"cannot take the lock of {folder}: it keeps being removed")


def lock_if_unheld(lock_path: Path) -> int | None:
    """Takes the `.lock` of another process's folder, to clean the folder up while holding it; None when
    the folder has no lock file (its process died before making one, or it is starting: it makes the
    folder again if removed, see `take_folder_lock`). Raises BlockingIOError when a live process holds
    the lock, or it was removed or replaced meanwhile (by whoever is cleaning the folder up)."""
    try:
        fd = os.open(lock_path, os.O_RDWR)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if not _same_file(fd, lock_path):
            raise BlockingIOError(errno.EAGAIN, "lock replaced", str(lock_path))
    except BlockingIOError:
        os.close(fd)
        raise
    return fd


def _same_file(fd: int, path: Path) -> bool:
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


UNREADABLE_GRACE_S = 60.0


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _parse_iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def process_name() -> str:
    """This process as a lock's or a claim's holder: `<host>:<pid>` (a holder on this host is checked with
    pid_alive)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def process_instance() -> str:
    """This process, unique even when a pid is reused (a container's gateway is pid 1 at every start):
    `<host>:<pid>:<start ns>`, as database leases, the process list and approvals' owners name it."""
    global _INSTANCE
    if _INSTANCE is None:
        _INSTANCE = f"{process_name()}:{time.time_ns()}"
    return _INSTANCE


_INSTANCE: str | None = None


def holder_process(holder: str) -> tuple[str, int | None]:
    """The host and process id a holder names (`<host>:<pid>[:...]`, as process_name and process_instance spell
    it); the pid is None when the holder names none."""
    host, _, rest = holder.partition(":")
    pid = rest.partition(":")[0]
    return host, int(pid) if pid.isdigit() else None


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class LockInfo:
    """The content of one lock file (spec 001: holder, resource, acquired_at, expires_at, pid)."""

    holder: str
    resource: str
    acquired_at: str
    expires_at: str
    pid: int

    @property
    def expired(self) -> bool:
        return _parse_iso(self.expires_at) <= datetime.now(UTC)

    @property
    def stale(self) -> bool:
        """Expired, or held by a process of this machine that no longer exists."""
        return self.expired or not pid_alive(self.pid)


class LockDirectory:
    """Creates, renews, releases and reclaims lock files; creation is atomic (O_EXCL), and a stale lock
    is reclaimed by renaming it away first, so two processes can never both take it over."""

    def __init__(self, folder: Path, *, holder: str, ttl_s: float = 60.0):
        self.folder = folder
        self.holder = holder
        self.ttl_s = ttl_s
        self.reclaimed = 0  # stale locks this directory took over (their holder may have died mid-work)
        folder.mkdir(parents=True, exist_ok=True)

    def path_for(self, resource: str) -> Path:
        digest = hashlib.sha256(resource.encode()).hexdigest()[:12]
        return self.folder / f"{safe_name(resource)[:60]}-{digest}.json"

    def _content(self) -> dict[str, Any]:
        now = datetime.now(UTC)
        return {"holder": self.holder, "acquired_at": _iso(now),
                "expires_at": _iso(now + timedelta(seconds=self.ttl_s)), "pid": os.getpid()}

    def acquire(self, resource: str) -> bool:
        """Takes the lock on `resource` if it is free, expired or left by a dead process."""
        path = self.path_for(resource)
        body = json.dumps({"resource": resource, **self._content()}).encode()
        for _ in range(2):
            # The lock appears whole: link(2) is atomic and fails when the name exists, so no
            # reader ever sees an empty lock file and mistakes it for a stale one.
            fresh = path.with_name(f"{path.name}.{os.getpid()}.{time.time_ns()}.new")
            fresh.write_bytes(body)
            try:
                os.link(fresh, path)
            except FileExistsError:
                current = self.read(path)
                if current is not None and current.holder == self.holder:
                    return True
                if current is not None and not current.stale:
                    return False
                if current is not None and not self._reclaim(path, current):
                    return False
                continue
            finally:
                fresh.unlink(missing_ok=True)
            return True
        return False

    def _reclaim(self, path: Path, seen: LockInfo) -> bool:
        """Moves the stale lock `seen` aside; puts the file back if it turned out to be a newer lock."""
        aside = path.with_name(f"{path.name}.reclaimed-{os.getpid()}-{time.time_ns()}")
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            return True  # released meanwhile: try to create it again
        moved = self.read(aside)
        try:
            if moved is not None and moved != seen and not moved.stale:
                with contextlib.suppress(FileExistsError):
                    os.link(aside, path)
                return False
            self.reclaimed += 1
            return True
        finally:
            aside.unlink(missing_ok=True)

    def release(self, resource: str) -> None:
        """Drops the lock if this holder has it."""
        path = self.path_for(resource)
        current = self.read(path)
        if current is not None and current.holder == self.holder:
            path.unlink(missing_ok=True)

    def renew(self, resources: list[str]) -> list[str]:
        """Moves the expiry of held locks forward (for work that outlives the TTL); returns those still held."""
        held = []
        for resource in resources:
            path = self.path_for(resource)
            current = self.read(path)
            if current is not None and current.holder == self.holder:
                content = {"resource": resource, **self._content(), "acquired_at": current.acquired_at}
                tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
                tmp.write_bytes(json.dumps(content).encode())
                os.replace(tmp, path)
                held.append(resource)
        return held

    @staticmethod
    def read(path: Path) -> LockInfo | None:
        """A lock file's content; an unreadable one counts as held for a minute after it was written."""
        try:
            raw = json.loads(path.read_bytes())
            return LockInfo(str(raw["holder"]), str(raw["resource"]), str(raw["acquired_at"]),
                            str(raw["expires_at"]), int(raw["pid"]))
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError):
            try:
                written = datetime.fromtimestamp(path.stat().st_mtime, UTC)
            except FileNotFoundError:
                return None
            return LockInfo("?", "?", _iso(written), _iso(written + timedelta(seconds=UNREADABLE_GRACE_S)), 0)

    def clean_expired(self) -> list[str]:
        """Removes every stale lock file (retention); returns the resources freed."""
        freed = []
        for path in self.folder.glob("*.json"):
            current = self.read(path)
            if current is not None and current.stale and self._reclaim(path, current):
                freed.append(current.resource)
        return freed
