"""Durable writes: a file is replaced whole by a rename, so a reader never sees half of it, and an empty file kept
ready in a folder takes the cost of creating one off the message path."""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from pathlib import Path

SPARE_PREFIX = ".spare."  # names of SpareFiles: `.spare.<pid>-<n>.tmp`

_tmp_ids = itertools.count()


def atomic_write(path: Path, data: bytes, *, fsync: bool = True, spares: SpareFiles | None = None,
                 sync_folder: bool = True) -> None:
    """Writes `data` to `path` through `<path>.<pid>-<n>.tmp` and a rename, so readers never see half
    a file; the temporary name is the writer's own, so two processes (or threads) writing the same
    file at once never rename each other's half-written file, and the last rename wins.

    With `spares` (of the same folder), a file created ahead of time serves as the temporary file.
    With `fsync` but not `sync_folder`, the new contents are on disk before the rename but the rename
    itself may be lost in a crash: `path` is then its previous version, whole (one fsync, not two).
    """
    target = os.fspath(path)  # plain strings: this runs several times per message
    spare = spares.take() if spares is not None and data else None  # (an empty write would keep its old mtime)
    if spare is not None:
        fd, tmp = spare
    else:
        tmp = f"{target}.{os.getpid()}-{next(_tmp_ids)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.replace(tmp, target)
    except FileNotFoundError:
        if spare is None:
            raise
        atomic_write(path, data, fsync=fsync)  # the spare was swept away meanwhile: write afresh
        return
    if fsync and sync_folder:
        fsync_dir(os.path.dirname(target) or ".")


class SpareFiles:
    """One empty file kept ready in a folder, so a write on the message path need not create one.

    Creating a file is the costliest step of a small durable write on some disks (100–350 µs on
    ext4 without a journal, against ~10 µs for the write itself); a spare moves that off the path
    from a message to its reply: the write takes the spare, and a new one is created on the event
    loop's next turn, after the reply is out. Without a running loop (a CLI command, another thread)
    none is made and writes create their own file. Spares are named `.spare.<pid>-<n>.tmp`, so
    watchers ignore them and a killed process's spare is removed at the next start like any stale
    `.tmp` file.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = os.fspath(folder)
        self._ready: list[tuple[int, str]] = []
        self._lock = threading.Lock()
        self._closed = False

    def take(self) -> tuple[int, str] | None:
        """An open spare (fd, path), or None; asks for the next one either way."""
        with self._lock:
            spare = self._ready.pop() if self._ready else None
        with contextlib.suppress(RuntimeError):  # no running loop in this thread: no spare then
            import asyncio  # here, not at the top: `switchyard --help` imports this module

            asyncio.get_running_loop().call_soon(self._refill)
        return spare

    def _refill(self) -> None:
        with self._lock:
            if self._ready or self._closed:
                return
            path = os.path.join(self.folder, f"{SPARE_PREFIX}{os.getpid()}-{next(_tmp_ids)}.tmp")
            with contextlib.suppress(OSError):  # a full disk, a folder removed: the writer creates its own
                self._ready.append((os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), path))

    def close(self) -> None:
        """Removes the spare not used."""
        with self._lock:
            self._closed = True
            for fd, path in self._ready:
                os.close(fd)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            self._ready.clear()


def write_all(fd: int, data: bytes) -> None:
    """Writes all of `data` to `fd` (os.write may write only part of it)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]



def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Flushes a directory entry change (a rename or unlink) to disk."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
