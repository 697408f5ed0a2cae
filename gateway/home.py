"""The home directory: where every folder lives, and the one way files are written into it."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import json
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_MAX_NAME_PART = 80
STALE_TMP_S = 60.0  # a `.tmp` file this old was left by a writer that died mid-write
FOLDER_LOCK_ATTEMPTS = 200
FOLDER_LOCK_PAUSE_S = 0.005  # while another process checks a folder it found unlocked (milliseconds)
SPARE_PREFIX = ".spare."  # names of SpareFiles: `.spare.<pid>-<n>.tmp`


def resolve_home(cli_home: str | os.PathLike[str] | None = None) -> Path:
    """Chooses the home: `--home`, else `$SWITCHYARD_HOME`, else `~/.switchyard`."""
    chosen = cli_home or os.environ.get("SWITCHYARD_HOME") or Path.home() / ".switchyard"
    return Path(chosen).expanduser().resolve()


def safe_name(part: str) -> str:
    """Makes an id usable as one file-name component: no separators, no dots at the start."""
    cleaned = _UNSAFE.sub("_", part).lstrip(".")[:_MAX_NAME_PART]
    return cleaned or "_"


_tmp_ids = itertools.count()


def atomic_write(path: Path, data: bytes, *, fsync: bool = True, spares: SpareFiles | None = None) -> None:
    """Writes `data` to `path` through `<path>.<pid>-<n>.tmp` and a rename, so readers never see half
    a file; the temporary name is the writer's own, so two processes (or threads) writing the same
    file at once never rename each other's half-written file, and the last rename wins.

    With `spares` (of the same folder), a file created ahead of time serves as the temporary file.
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
    if fsync:
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


class NotRegularFile(ValueError):
    """A path that is not a regular file (a FIFO, a directory, a symbolic link...): never read."""


_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "not a regular file: a FIFO"),
          (stat.S_ISDIR, "not a regular file: a directory"), (stat.S_ISSOCK, "not a regular file: a socket"),
          (stat.S_ISCHR, "not a regular file: a character device"),
          (stat.S_ISBLK, "not a regular file: a block device"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_file(path: str | os.PathLike[str], limit: int | None = None) -> bytes:
    """Reads a regular file with plain system calls (a buffered reader costs several more per file on
    the per-message path); with `limit`, at most `limit + 1` bytes, so an oversized file is detected
    without loading it.

    A symbolic link is not followed and a FIFO's open does not wait for a writer (O_NOFOLLOW,
    O_NONBLOCK); what was opened is checked with fstat, never by path, and anything but a regular
    file raises NotRegularFile naming its kind. The checks add no system call to a regular file's read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegularFile("a symbolic link") from exc
        if exc.errno == errno.ENXIO:  # a socket (or a device without a driver) cannot be opened
            raise NotRegularFile(_kind(os.lstat(path).st_mode)) from exc
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(_kind(info.st_mode))
        want = info.st_size + 1  # +1: notices a file that grew since the fstat
        chunks: list[bytes] = []
        total = 0
        while limit is None or total <= limit:
            if limit is not None:
                want = min(want, limit + 1 - total)
            chunk = os.read(fd, want)
            chunks.append(chunk)
            total += len(chunk)
            if len(chunk) < want:  # a regular file reads short only at its end
                break
            want = 65536
        return b"".join(chunks)
    finally:
        os.close(fd)


def scan_mtimes(folder: Path, keep: Callable[[str], bool]) -> Iterator[tuple[str, int]]:
    """(name, mtime in ns) of each entry of `folder` whose name `keep` accepts, leaving out the ones
    that vanished between the listing and their stat (taken by another process sharing the home);
    a symbolic link's own mtime, not its target's."""
    for entry in os.scandir(folder):
        if keep(entry.name):
            try:
                yield entry.name, entry.stat(follow_symlinks=False).st_mtime_ns
            except FileNotFoundError:
                continue


def remove_old_files(folder: Path, match: Callable[[str], bool], older_than_s: float) -> list[str]:
    """Deletes the files of `folder` whose name `match` accepts, last changed more than
    `older_than_s` ago; a missing folder, or a file removed meanwhile (another process pruning the
    same home), is skipped. Returns the names removed."""
    cutoff_ns = time.time_ns() - int(older_than_s * 1e9)
    removed = []
    with contextlib.suppress(FileNotFoundError):
        for name, mtime_ns in list(scan_mtimes(folder, match)):
            if mtime_ns < cutoff_ns:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(folder / name)
                    removed.append(name)
    return removed


def remove_stale_tmp(folder: Path) -> list[str]:
    """Deletes the `.tmp` files a writer killed in the middle of an `atomic_write` left in `folder`
    (older than STALE_TMP_S: a live writer renames its file within milliseconds)."""
    return remove_old_files(folder, lambda name: name.endswith(".tmp"), STALE_TMP_S)


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Flushes a directory entry change (a rename or unlink) to disk."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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


def is_within(path: Path, roots: list[Path]) -> bool:
    """Tells whether `path`, with symlinks and `..` resolved, lies inside one of `roots`."""
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return False
    return any(real.is_relative_to(root.resolve()) for root in roots)


@dataclass(frozen=True)
class Home:
    """The paths of one Switchyard home directory (each computed once: they sit on the hot path)."""

    root: Path

    @cached_property
    def settings_file(self) -> Path:
        return self.root / "settings.yaml"

    @cached_property
    def queue(self) -> Path:
        return self.root / "queue"

    @cached_property
    def incoming(self) -> Path:
        return self.queue / "incoming"

    @cached_property
    def processing(self) -> Path:
        return self.queue / "processing"

    @cached_property
    def outgoing(self) -> Path:
        return self.queue / "outgoing"

    @cached_property
    def failed(self) -> Path:
        return self.queue / "failed"

    @cached_property
    def sent(self) -> Path:
        return self.queue / "sent"

    @cached_property
    def state(self) -> Path:
        """Bookkeeping kept beside the queue: attempt counts, answered ids, delivery records."""
        return self.queue / "state"

    @cached_property
    def files(self) -> Path:
        return self.root / "files"

    @cached_property
    def select_incoming(self) -> Path:
        return self.root / "orchestrator" / "select" / "incoming"

    @cached_property
    def select_results(self) -> Path:
        return self.root / "orchestrator" / "select" / "results"

    @cached_property
    def orchestrators(self) -> Path:
        return self.root / "orchestrators"

    @cached_property
    def runs(self) -> Path:
        return self.root / "runs"

    @cached_property
    def coordination(self) -> Path:
        return self.root / "coordination"

    @cached_property
    def logs(self) -> Path:
        return self.root / "logs"

    @cached_property
    def events_file(self) -> Path:
        return self.logs / "events.jsonl"

    def resolve(self, configured: str | os.PathLike[str]) -> Path:
        """Resolves a path from settings: absolute as given, relative against the home."""
        path = Path(configured).expanduser()
        return path if path.is_absolute() else self.root / path

    def create(self) -> None:
        """Creates every folder of the layout (idempotent)."""
        for folder in (
            self.incoming, self.processing, self.outgoing, self.failed, self.sent, self.state,
            self.files, self.select_incoming, self.select_results, self.orchestrators,
            self.runs, self.coordination, self.logs,
        ):
            folder.mkdir(parents=True, exist_ok=True)


def queue_depths(home: Home) -> dict[str, int]:
    """Counts payload files per queue folder (for `status` and /metrics; here, so that
    `status` need not import the queue)."""
    depths = {}
    for name, folder in (("incoming", home.incoming), ("outgoing", home.outgoing),
                         ("failed", home.failed), ("sent", home.sent)):
        try:
            depths[name] = sum(
                1 for e in os.scandir(folder)
                if e.name.endswith(".json") and not e.name.endswith(".error.json")
            )
        except FileNotFoundError:
            depths[name] = 0
    processing = 0
    if home.processing.exists():
        for _dirpath, _dirs, files in os.walk(home.processing):
            processing += sum(1 for f in files if f.endswith(".json"))
    depths["processing"] = processing
    return depths


def stored_reply(home: Home, message_id: str, since_ms: int) -> dict[str, Any] | None:
    """The reply to `message_id` in outgoing/ or sent/ stamped at `since_ms` or later, as the home's outbox
    wrote it (the file and memory backends); a progress note or a streamed answer's draft is not the reply."""
    for folder in (home.outgoing, home.sent):
        with os.scandir(folder) as entries:  # closed when a reply returns from inside the loop
            for entry in entries:
                if entry.name.endswith(".json") and message_id in entry.name:
                    try:
                        reply: dict[str, Any] = json.loads(Path(entry.path).read_bytes())
                    except (OSError, ValueError):
                        continue
                    if (reply.get("messageId") == message_id and "progressKey" not in reply
                            and isinstance(reply.get("timestamp"), int) and reply["timestamp"] >= since_ms):
                        return reply
    return None
