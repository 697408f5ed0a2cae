"""The durable file queue: an in-memory index of `incoming/`, atomic claims, requeue, dead letters, recovery."""

from __future__ import annotations

import contextlib
import heapq
import json
import logging
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.home import (
    Home,
    NotRegularFile,
    SpareFiles,
    atomic_write,
    lock_if_unheld,
    read_file,
    remove_stale_tmp,
    safe_name,
    scan_mtimes,
    take_folder_lock,
)
from gateway.spool.deadletters import move_to_failed
from gateway.spool.edits import fold_edit
from gateway.spool.order import NameSequence, order_of

if TYPE_CHECKING:
    from gateway.models import IncomingPayload

log = logging.getLogger("switchyard.queue")

CLAIM_RETRY_S = 1.0


@dataclass(order=True)
class _Entry:
    order: int  # see order_of()
    name: str
    not_before: float = field(default=0.0, compare=False)


@dataclass
class Claimed:
    """A payload file moved into this worker's `processing/` folder, with its raw bytes."""

    name: str
    path: Path
    data: bytes
    order: tuple[int, str]
    attempts: int
    errors: list[str]
    invalid: str | None = None  # why the file cannot be a payload without being read (e.g. "a symbolic link")


class FileQueue:
    """Claims payloads from `incoming/` oldest first by (place, name), without rescanning the folder
    (a file's place: NameSequence.place; a file seen arriving, by first sight).

    The index is fed by `notice(name)` (from a FolderWatch) and by `rescan()`; a claim is one
    atomic rename into `processing/w<pid>/`, so two processes sharing a home never claim one file
    twice. Attempt counts live in `queue/state/attempts/`, outside the payload, so a retried file
    keeps its bytes untouched.
    """

    def __init__(self, home: Home, *, fsync: bool = True, max_payload_bytes: int = 1_048_576):
        self.home = home
        self.fsync = fsync
        self.max_payload_bytes = max_payload_bytes
        self._heap: list[_Entry] = []
        self._waiting: list[tuple[float, _Entry]] = []
        self._indexed: set[str] = set()
        self._names = NameSequence()
        self._backlog_read = False  # whether the start-up listing of incoming/ was indexed
        self.worker_dir = home.processing / f"w{os.getpid()}"
        self._attempts_dir = home.state / "attempts"
        self._lock_fd = -1
        self._with_attempts: set[str] = set()
        self._vanished: list[tuple[int, str]] = []
        self._claim_errors: list[str] = []
        self._peeked: dict[str, tuple[str, ...]] = {}  # ordering keys of files read in incoming/ (shared home)
        self._deferred: list[_Entry] = []  # files whose keys another process holds, until end_pass()
        self._spares = SpareFiles(home.incoming)  # for enqueue on the event loop
        self.pending_edits: Callable[[IncomingPayload], bool] | None = None

    # --- life cycle -------------------------------------------------------------------------

    def open(self) -> list[str]:
        """Creates the folders, takes this worker's lock and recovers what dead workers left behind (a line each)."""
        self.home.create()
        self._attempts_dir.mkdir(parents=True, exist_ok=True)
        self._lock_fd = take_folder_lock(self.worker_dir)
        self._with_attempts = {p.name.removesuffix(".json") for p in self._attempts_dir.iterdir()}
        actions = self._recover()
        self.rescan()
        return actions

    def recover_dead_workers(self) -> list[str]:
        """Returns to incoming/ (and indexes) what workers that died while this one ran had claimed."""
        actions = self._recover_folders(self._dead_worker_dirs(include_own=False))
        self.rescan()
        return actions

    def close(self) -> None:
        """Releases the worker lock; files still in processing are recovered by the next start."""
        self._spares.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def _recover(self) -> list[str]:
        actions: list[str] = []
        # incoming/ first (a stale .tmp there is never claimed); then the other folders written
        # through atomic_write, so a writer killed mid-write leaves nothing behind for long
        for folder in (self.home.incoming, self.home.outgoing, self.home.failed, self.home.state,
                       self._attempts_dir):
            actions += [f"removed stale {name}" for name in remove_stale_tmp(folder)]
        return actions + self._recover_folders(self._dead_worker_dirs(include_own=True))

    def _recover_folders(self, folders: list[Path]) -> list[str]:
        """Returns what these processing folders hold to incoming/ and removes the other workers' ones,
        each while holding its lock (never the folder of a worker alive; one starting makes it again)."""
        actions: list[str] = []
        for folder in folders:
            if folder == self.worker_dir:
                actions += self._return_all(folder)
                continue
            try:
                lock_fd = lock_if_unheld(folder / ".lock")
            except BlockingIOError:
                continue  # its worker runs, or another process is recovering it
            try:
                actions += self._return_all(folder)
                if lock_fd is not None:
                    (folder / ".lock").unlink(missing_ok=True)
                with contextlib.suppress(OSError):
                    folder.rmdir()
            finally:
                if lock_fd is not None:
                    os.close(lock_fd)
        return actions

    def _return_all(self, folder: Path) -> list[str]:
        actions: list[str] = []
        try:
            entries = list(os.scandir(folder))
        except FileNotFoundError:  # another starting worker recovered and removed it first
            return actions
        for entry in entries:  # whatever its kind (a claimed FIFO or link too): the claim quarantines it
            if entry.name.endswith(".json"):
                try:
                    actions.append(self._return_to_incoming(Path(entry.path)))
                except FileNotFoundError:
                    continue  # another starting worker recovered it first
        return actions

    def _dead_worker_dirs(self, *, include_own: bool) -> list[Path]:
        """Every other processing folder (whether its worker is dead is known under its lock, in
        `_recover_folders`), and our own if asked."""
        dead = []
        for entry in os.scandir(self.home.processing):
            path = Path(entry.path)
            if path == self.worker_dir:
                if include_own:
                    dead.append(path)
            elif entry.is_dir():
                dead.append(path)
        return dead

    def _return_to_incoming(self, path: Path) -> str:
        """Moves a recovered file back to incoming/; a name already there is resolved without loss."""
        target = self.home.incoming / path.name
        if os.path.lexists(target):
            if _is_regular(target) and _is_regular(path) and target.read_bytes() == path.read_bytes():
                path.unlink()
                return f"dropped {path.name} from processing: identical copy already in incoming"
            target = self.home.incoming / f"{path.stem}.recovered-{self._names.prefix()}{path.suffix}"
        os.rename(path, target)
        with contextlib.suppress(FileNotFoundError):  # it keeps the place it had: by name, else by mtime
            if target.name not in self._indexed:
                self._add(target.name, self._names.place(target.name, os.lstat(target).st_mtime_ns))
        return f"returned {path.name} to incoming as {target.name}"

    # --- index ------------------------------------------------------------------------------

    def rescan(self) -> None:
        """Lists `incoming/` once and indexes every file not yet known: at start the backlog, placed by
        `order_of` (a gateway name's stamp, else the mtime); later (an inotify overflow) the files
        missed, as arrivals seen now, in the order of their names' stamps or mtimes."""
        found = sorted((order_of(name, mtime_ns), name) for name, mtime_ns in scan_mtimes(
            self.home.incoming, lambda name: not name.endswith(".tmp") and name not in self._indexed))
        for mtime_order, name in found:
            self._add(name, self._names.place(name, None if self._backlog_read else mtime_order))
        self._backlog_read = True

    def notice(self, name: str) -> None:
        """Indexes a file that just appeared in `incoming/` (called by the folder watch): a name the
        gateway wrote by its stamp, any other by first sight (never its mtime, which a clock stepped
        back, or another program, may have put anywhere)."""
        if name.endswith(".tmp") or name in self._indexed:
            return
        try:  # also tells a late inotify event for a file already claimed, and gone, from a new one
            os.lstat(self.home.incoming / name)
        except FileNotFoundError:
            return
        self._add(name, self._names.place(name, None))

    def _add(self, name: str, order: int, not_before: float = 0.0) -> None:
        entry = _Entry(order, name, not_before)
        self._indexed.add(name)
        if not_before > time.monotonic():
            heapq.heappush(self._waiting, (not_before, entry))
        else:
            heapq.heappush(self._heap, entry)

    def _promote_due(self) -> None:
        now = time.monotonic()
        while self._waiting and self._waiting[0][0] <= now:
            heapq.heappush(self._heap, heapq.heappop(self._waiting)[1])

    def next_due_in(self) -> float | None:
        """Seconds until the earliest backing-off file becomes eligible (None if none waits)."""
        if not self._waiting:
            return None
        return max(0.0, self._waiting[0][0] - time.monotonic())

    # --- claim and outcomes -----------------------------------------------------------------

    def claim(self) -> Claimed | None:
        """Claims the oldest eligible file by renaming it into processing/; None when none is ready."""
        self._promote_due()
        while self._heap:
            claimed = self._take(heapq.heappop(self._heap))
            if claimed is not None:
                return claimed
        return None

    def claim_admitted(self, keys_of: Callable[[bytes], tuple[str, ...]],
                       admit: Callable[[tuple[str, ...]], bool]) -> Claimed | None:
        """Claims the oldest eligible file whose ordering keys `admit` accepts (on a shared home).

        Each file is read in incoming/ before it is claimed, once (its keys are kept by name), and
        claimed only when `admit` holds or can take the cross-process locks of all its keys; a
        file refused stays in incoming/, set aside until `end_pass()`. Since every process orders
        incoming/ alike and only a key's lock holder claims its messages, oldest first, a key's
        messages are claimed in order whichever process runs them. A file that cannot be read or
        parsed (`keys_of` gives no keys) is claimed at once, to be quarantined as by `claim()`.
        The bytes read here only choose; the claimed file is read again after the rename, so what
        runs is always what was claimed (the caller checks it holds that file's keys).
        """
        self._promote_due()
        while self._heap:
            entry = heapq.heappop(self._heap)
            keys = self._peeked.get(entry.name)
            if keys is None:
                try:
                    data = read_file(self.home.incoming / entry.name, self.max_payload_bytes)
                except FileNotFoundError:
                    self._indexed.discard(entry.name)
                    self._vanished.append((entry.order, entry.name))
                    continue  # claimed by another process, or removed by hand
                except (NotRegularFile, OSError):  # a FIFO, a link, unreadable...: claimed, quarantined
                    data = b""
                keys = self._peeked[entry.name] = keys_of(data)
            if keys and not admit(keys):
                self._deferred.append(entry)
                continue
            del self._peeked[entry.name]
            claimed = self._take(entry)
            if claimed is not None:
                return claimed
        return None

    def end_pass(self) -> None:
        """Puts the files `claim_admitted` set aside back in line, for the next pass."""
        for entry in self._deferred:
            heapq.heappush(self._heap, entry)
        self._deferred.clear()

    def _take(self, entry: _Entry) -> Claimed | None:
        """Renames one indexed file into processing/ and reads it; None if it was gone or refused."""
        self._indexed.discard(entry.name)
        source = self.home.incoming / entry.name
        target = self.worker_dir / entry.name
        try:
            os.rename(source, target)
        except FileNotFoundError:
            self._vanished.append((entry.order, entry.name))
            return None  # claimed by another worker, or removed by hand
        except OSError as exc:  # a folder not writable, a full disk: keep it, try again later
            self._claim_errors.append(f"cannot claim {entry.name}: {exc}")
            self._add(entry.name, entry.order, time.monotonic() + CLAIM_RETRY_S)
            return None
        return self._read_claimed(entry, target)

    def _read_claimed(self, entry: _Entry, target: Path) -> Claimed:
        """The claimed file's bytes; a FIFO, link, directory... is marked invalid and never read."""
        attempts, errors = self._read_attempts(entry.name)
        invalid = None
        try:
            data = read_file(target, self.max_payload_bytes)
        except NotRegularFile as exc:
            data, invalid = b"", str(exc)
        except OSError as exc:
            data = b""
            errors = [*errors, f"cannot read: {exc}"]
        return Claimed(entry.name, target, data, (entry.order, entry.name), attempts, errors, invalid)

    def take_claim_errors(self) -> list[str]:
        """Why claims failed since the last call (the files stay indexed and are tried again)."""
        errors, self._claim_errors = self._claim_errors, []
        return errors

    def take_vanished(self) -> list[tuple[int, str]]:
        """Orders of indexed files that were gone when claimed (taken by another worker or by hand)."""
        vanished, self._vanished = self._vanished, []
        return vanished

    def complete(self, claimed: Claimed) -> None:
        """Removes a claimed file after its replies were written."""
        claimed.path.unlink(missing_ok=True)
        self._forget_attempts(claimed.name)

    def _forget_attempts(self, name: str) -> None:
        if name in self._with_attempts:
            self._with_attempts.discard(name)
            (self._attempts_dir / f"{name}.json").unlink(missing_ok=True)

    def requeue(self, claimed: Claimed, error: str, delay_s: float) -> int:
        """Counts a failed attempt and returns the file to incoming/ untouched, eligible after `delay_s`."""
        attempts = claimed.attempts + 1
        record = {"attempts": attempts, "errors": [*claimed.errors, error][-20:]}
        atomic_write(self._attempts_dir / f"{claimed.name}.json", json.dumps(record).encode(),
                     fsync=self.fsync)
        self._with_attempts.add(claimed.name)
        os.rename(claimed.path, self.home.incoming / claimed.name)
        self._add(claimed.name, claimed.order[0], time.monotonic() + delay_s)
        return attempts

    def release(self, claimed: Claimed, delay_s: float) -> None:
        """Returns a claimed file to incoming/ untouched and uncounted, eligible again after `delay_s`."""
        os.rename(claimed.path, self.home.incoming / claimed.name)
        self._add(claimed.name, claimed.order[0], time.monotonic() + delay_s)

    def dead_letter(self, claimed: Claimed, reason: str, *, attempts: int | None = None,
                    conversation: str | None = None) -> Path:
        """Moves the original bytes to failed/ under the original name, with `<name>.error.json` (which
        names the message's conversation when known, so listing dead letters need not read them)."""
        target = move_to_failed(self.home, claimed.path, fsync=self.fsync, reason=reason,
                                attempts=attempts if attempts is not None else claimed.attempts,
                                errors=claimed.errors, **({"conversation": conversation} if conversation else {}))
        self._forget_attempts(claimed.name)
        return target

    def _read_attempts(self, name: str) -> tuple[int, list[str]]:
        if name not in self._with_attempts:
            return 0, []
        try:
            record = json.loads((self._attempts_dir / f"{name}.json").read_bytes())
            return int(record["attempts"]), list(record.get("errors", []))
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return 0, []

    # --- writing payloads -------------------------------------------------------------------

    def rewrite_claimed(self, claimed: Claimed, data: bytes) -> None:
        """Replaces a claimed file's bytes where it is (an edit folded into it before it started)."""
        atomic_write(claimed.path, data, fsync=self.fsync)

    def start(self, claimed: Claimed) -> bytes:
        return claimed.data  # as claimed: an edit folds into a claimed file through the worker (`pending_edits`)

    def holds_worker_lock(self) -> bool:
        """Whether this handle is open (its processing/ folder is its own)."""
        return self._lock_fd >= 0

    def fold_edit(self, edit: IncomingPayload) -> bool:
        """Puts an edit's text into its original while that one waits: in incoming/ (gateway.spool.edits),
        else claimed by this process's worker but not started (`pending_edits`, set by the worker)."""
        return fold_edit(self, edit) or (self.pending_edits is not None and self.pending_edits(edit))

    def enqueue(self, data: bytes, *, hint: str = "msg") -> Path:
        """Writes a payload into incoming/ atomically under a sortable, unique name."""
        name = f"{self._names.prefix()}-{safe_name(hint)}.json"
        path = self.home.incoming / name
        atomic_write(path, data, fsync=self.fsync, spares=self._spares)
        return path


def _is_regular(path: Path) -> bool:
    """Whether `path` itself (never a link's target) is a regular file, safe to read."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False
