"""`runs/active.json`, the file run store's conversation key -> run id index: read whole, written whole under
a lock shared by the processes on the home, never fsynced (the store rebuilds it from the runs' own state at
start), and each write drops the entries of runs this process saw end since the last one."""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Callable, Iterator
from pathlib import Path

from gateway.home import atomic_write


class ActiveFile:
    """The index file under `root`; `made` creates a folder when first written into."""

    def __init__(self, root: Path, made: Callable[[Path], Path]):
        self._root = root
        self._made = made
        self._ended_since: set[str] = set()

    @property
    def path(self) -> Path:
        return self._root / "active.json"

    def read(self) -> dict[str, str]:
        """The index as stored; a missing or torn file (after a power cut) is an empty one."""
        try:
            data = json.loads(self.path.read_bytes())
        except (FileNotFoundError, ValueError):
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def ended(self, run_id: str) -> None:
        """A run of this process ended: its entry goes at the next write."""
        self._ended_since.add(run_id)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Serialises read-modify-write of the index across processes sharing the home."""
        with (self._made(self._root) / ".active.lock").open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def write(self, active: dict[str, str]) -> None:
        """Replaces the index with `active`, less the runs that ended since the last write (call it locked)."""
        ended, self._ended_since = self._ended_since, set()
        active = {key: run_id for key, run_id in active.items() if run_id not in ended}
        atomic_write(self._made(self._root) / "active.json", json.dumps(active, indent=2).encode(), fsync=False)
