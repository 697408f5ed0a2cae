"""The validation cache of `switchyard status`: what status derived from configuration files (settings.yaml,
each orchestrator.yaml), kept in `queue/state/status-cache.json` while those files are unchanged, so status on
an unchanged home neither imports pydantic nor validates anything.

A file is unchanged while its size, mtime, ctime, inode and device are; the code that validates is keyed the
same way (an upgrade rewrites it). A missing, corrupt or outdated cache is ignored and written afresh.

A file changed within the file system's timestamp granularity of being looked at is not trusted (as git's
"racily clean" entries): an edit made in the same clock tick would leave every field as it was, so such a
file is recorded as changed and validated again next time.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from gateway.home import Home, atomic_write

if TYPE_CHECKING:
    from gateway.settings import Settings

T = TypeVar("T")
CACHE_NAME = "status-cache.json"
FORMAT = 1
RACY_NS = 50_000_000  # file timestamps come from a coarse clock (a jiffy: 1–10 ms on Linux)
RACY_COARSE_NS = 2_000_000_000  # a file system that keeps whole seconds (FAT: 2 s)
UNTRUSTED = [-1]  # recorded for a file changed too recently to tell a later edit from it
_ROOT = Path(__file__).resolve().parent.parent
# The packages whose modules decide what status reports about configuration (validation, the provider
# presets' programs, retention, heartbeat): an edit or upgrade of any module in them invalidates the cache.
CODE_FOLDERS = ("gateway", "orchestrator", "orchestrator/agents/clis", "plugins/heartbeat")


def code_files() -> list[str]:
    """Every module of CODE_FOLDERS."""
    files = []
    for folder in CODE_FOLDERS:
        try:
            files += sorted(entry.path for entry in os.scandir(_ROOT / folder) if entry.name.endswith(".py"))
        except OSError:
            continue
    return files


def identity(path: str | os.PathLike[str]) -> list[int] | None:
    """What tells one version of a file from another without reading it; None when it is absent."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    changed = max(stat.st_mtime_ns, stat.st_ctime_ns)
    window = RACY_COARSE_NS if changed % 1_000_000_000 == 0 else RACY_NS
    if time.time_ns() - changed < window:
        return UNTRUSTED
    return [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_dev]


def file_digest(path: str | os.PathLike[str]) -> str | None:
    """The sha256 of a file's bytes: the version a running gateway read of settings.yaml, told by its content
    (None when the file is absent or unreadable)."""
    import hashlib

    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None


def _identities(paths: Iterable[str | os.PathLike[str]]) -> dict[str, list[int] | None]:
    return {os.fspath(path): identity(path) for path in paths}


class StatusFileCache:
    """Values computed from configuration files, each remembered with the files it came from; valid
    (a hit) only when settings.yaml, every remembered file and the validating code are unchanged."""

    def __init__(self, path: Path | None, settings_path: Path, stored: dict[str, Any] | None = None):
        self._path = path
        self._files = _identities([settings_path, *code_files()])
        self._settings_path = os.fspath(settings_path)
        self._entries: dict[str, Any] = {}
        self._changed = False
        if stored is not None and self._valid(stored):
            self._entries = stored["entries"]
            self._files.update(stored["files"])

    @classmethod
    def load(cls, home: Home, settings_path: Path) -> StatusFileCache:
        """The home's cache for this settings file (empty when missing, corrupt or outdated)."""
        path = home.state / CACHE_NAME
        try:
            stored = json.loads(path.read_bytes())
        except (OSError, ValueError):
            stored = None
        return cls(path, settings_path, stored if isinstance(stored, dict) else None)

    @classmethod
    def empty(cls, settings_path: Path) -> StatusFileCache:
        """A cache that remembers nothing on disk (for a caller with no home to keep it in)."""
        return cls(None, settings_path)

    def _valid(self, stored: dict[str, Any]) -> bool:
        files, entries = stored.get("files"), stored.get("entries")
        if stored.get("format") != FORMAT or stored.get("settings") != self._settings_path:
            return False
        if not isinstance(files, dict) or not isinstance(entries, dict):
            return False
        known = {path: files.get(path) for path in self._files}
        if known != self._files:
            return False  # settings.yaml or the code changed
        if UNTRUSTED in self._files.values():
            return False
        return all(stamp != UNTRUSTED and identity(path) == stamp
                   for path, stamp in files.items() if path not in self._files)

    def remember(self, key: str, compute: Callable[[], T], files: Callable[[], Iterable[Path]] = tuple) -> T:
        """The value under `key`: the remembered one, or `compute()`'s, remembered with `files` (the files it
        reads besides settings.yaml), whose identities are taken before it runs, so an edit made meanwhile
        shows as a change next time. The value must survive a JSON round trip."""
        if key in self._entries:
            value: T = self._entries[key]
            return value
        stamps = _identities(files())
        value = compute()
        self._entries[key] = value
        self._files.update(stamps)
        self._changed = True
        return value

    def save(self) -> None:
        """Writes the cache when something was computed (atomically; a failed write only costs time later)."""
        if self._path is None or not self._changed:
            return
        data = {"format": FORMAT, "settings": self._settings_path, "files": self._files, "entries": self._entries}
        try:
            atomic_write(self._path, json.dumps(data).encode(), fsync=False)
        except (OSError, TypeError, ValueError):
            return


class LazySettings:
    """Stands in for Settings where they may not be needed: loads (and validates) them when an attribute
    is first read, so a `status` answered from the cache never imports pydantic."""

    def __init__(self, load: Callable[[], Settings]):
        self._load = load

    def __getattr__(self, name: str) -> Any:
        return getattr(self._load(), name)
