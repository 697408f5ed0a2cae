"""TTL locks in `coordination/locks/` (spec 001): one holder per resource across processes sharing a home."""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gateway.home import safe_name


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _parse_iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _pid_alive(pid: int) -> bool:
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
        return self.expired or not _pid_alive(self.pid)


class LockDirectory:
    """Creates, renews, releases and reclaims lock files; creation is atomic (O_EXCL), and a stale lock
    is reclaimed by renaming it away first, so two processes can never both take it over."""

    def __init__(self, folder: Path, *, holder: str, ttl_s: float = 60.0):
        self.folder = folder
        self.holder = holder
        self.ttl_s = ttl_s
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
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                current = self.read(path)
                if current is not None and current.holder == self.holder:
                    return True
                if current is not None and not current.stale:
                    return False
                if not self._reclaim(path):
                    return False
                continue
            try:
                os.write(fd, body)
            finally:
                os.close(fd)
            return True
        return False

    def _reclaim(self, path: Path) -> bool:
        aside = path.with_name(f"{path.name}.reclaimed-{os.getpid()}-{time.time_ns()}")
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            return True  # released meanwhile: try to create it again
        aside.unlink(missing_ok=True)
        return True

    def release(self, resource: str) -> None:
        """Drops the lock if this holder has it."""
        path = self.path_for(resource)
        current = self.read(path)
        if current is not None and current.holder == self.holder:
            path.unlink(missing_ok=True)

    def renew(self, resources: list[str]) -> None:
        """Moves the expiry of held locks forward (for work that outlives the TTL)."""
        for resource in resources:
            path = self.path_for(resource)
            current = self.read(path)
            if current is not None and current.holder == self.holder:
                content = {"resource": resource, **self._content(), "acquired_at": current.acquired_at}
                tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
                tmp.write_bytes(json.dumps(content).encode())
                os.replace(tmp, path)

    @staticmethod
    def read(path: Path) -> LockInfo | None:
        try:
            raw = json.loads(path.read_bytes())
            return LockInfo(str(raw["holder"]), str(raw["resource"]), str(raw["acquired_at"]),
                            str(raw["expires_at"]), int(raw["pid"]))
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError):
            return LockInfo("?", "?", _iso(datetime.now(UTC)), _iso(datetime.fromtimestamp(0, UTC)), 0)

    def clean_expired(self) -> list[str]:
        """Removes every stale lock file (retention); returns the resources freed."""
        freed = []
        for path in self.folder.glob("*.json"):
            current = self.read(path)
            if current is not None and current.stale and self._reclaim(path):
                freed.append(current.resource)
        return freed
