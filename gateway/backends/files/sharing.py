"""Whether other `switchyard run` processes share this home: one kernel lock decides if key locks are needed."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from gateway.disk.locks import pid_alive
from gateway.stores import Locks


class SharedHome:
    """Tells whether other `switchyard run` processes share this home, with one lock file.

    A process alone on its home holds an exclusive lock on `queue/state/workers.lock` and needs no
    key lock files (they cost a file creation per message). A process that starts while another
    holds it writes `queue/state/share/<pid>` and waits; the lone process, woken by that file, takes
    the key locks of the messages it is running, then turns its lock into a shared one in one step
    (an open-file-description lock conversion is atomic), after which every process takes key locks
    for what it starts. The kernel drops a dead process's lock, so a crash never blocks the others.
    """

    def __init__(self, state_dir: Path):
        self.path = state_dir / "workers.lock"
        self.requests = state_dir / "share"
        self.mode: Literal["waiting", "solo", "shared"] = "waiting"
        self._fd = -1
        self._before_sharing: list[Callable[[], bool]] = []  # each writes out what it kept in memory alone

    @property
    def opened(self) -> bool:
        return self._fd >= 0

    def open(self) -> None:
        """Opens the lock file and takes the lock if it can; else asks the lone process to share (once:
        the worker and the job locks of one process share one SharedHome)."""
        if self.opened:
            return
        self.requests.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        if not self.poll():
            (self.requests / str(os.getpid())).write_text(str(os.getpid()))

    def poll(self) -> bool:
        """Tries to take the lock (exclusive, else shared) while waiting; True once it is held."""
        if self.mode == "waiting":
            if self._try(fcntl.F_WRLCK):
                self.mode = "solo"
            elif self._try(fcntl.F_RDLCK):
                self.mode = "shared"
            else:
                return False
            with contextlib.suppress(OSError):
                (self.requests / str(os.getpid())).unlink(missing_ok=True)
        return True

    def requested(self) -> bool:
        """Whether a live process asked to share this home (requests of dead ones are removed)."""
        try:
            names = [entry.name for entry in os.scandir(self.requests)]
        except OSError:
            return False
        for name in names:
            if name.isdigit() and int(name) != os.getpid() and pid_alive(int(name)):
                return True
            with contextlib.suppress(OSError):
                (self.requests / name).unlink()
        return False

    def share(self) -> bool:
        """Turns the exclusive lock into a shared one (after the running keys' locks were taken), once what
        was held only in memory while alone is written out (`before_sharing`)."""
        if self.mode == "solo" and all(write() for write in self._before_sharing) and self._try(fcntl.F_RDLCK):
            self.mode = "shared"
        return self.mode == "shared"

    def before_sharing(self, write: Callable[[], bool]) -> None:
        """Has `write` called before the home is shared; its False (a lock held elsewhere) defers sharing."""
        self._before_sharing.append(write)

    def _try(self, kind: int) -> bool:
        request = struct.pack("hhqqixxxx", kind, os.SEEK_SET, 0, 1, 0)  # struct flock, l_pid 0 for OFD locks
        try:
            fcntl.fcntl(self._fd, fcntl.F_OFD_SETLK, request)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EAGAIN):
                return False
            raise
        return True

    def close(self) -> None:
        """Releases the lock (another waiting process may take it) and withdraws any request."""
        with contextlib.suppress(OSError):
            (self.requests / str(os.getpid())).unlink(missing_ok=True)
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class SoloLocks:
    """Locks (gateway.stores.Locks) that are lock files only when other processes may take them.

    While this process is alone on its home (`SharedHome` "solo"), nobody else can take a lock, so one
    taken is only remembered: a run's job lock cost a file created and deleted per chat message. Before
    the home is shared those are written as lock files (`SharedHome.before_sharing`); from then on every
    lock is a file. A process that waits for a lone one to share takes none (False): the lone one may
    hold it in memory until it shares. Without a worker on the home (SharedHome not opened by the file
    runtime), every lock is a file, as before.
    """

    def __init__(self, files: Locks, sharing: SharedHome):
        self._files = files
        self._sharing = sharing
        self._remembered: set[str] = set()
        self.holder = files.holder
        self.ttl_s = files.ttl_s
        sharing.before_sharing(self.write_out)

    @property
    def reclaimed(self) -> int:
        return self._files.reclaimed

    def acquire(self, resource: str) -> bool:
        if not self._sharing.opened:  # no worker of this process on the home (its runtime opens it): files
            return self._files.acquire(resource)
        if self._sharing.mode == "waiting" and not self._sharing.poll():
            return False
        if self._sharing.mode == "solo":  # alone already, or since the poll just now
            self._remembered.add(resource)
            return True
        return self._files.acquire(resource)

    def release(self, resource: str) -> None:
        if resource in self._remembered:
            self._remembered.discard(resource)
        else:
            self._files.release(resource)

    def renew(self, resources: list[str]) -> list[str]:
        remembered = [resource for resource in resources if resource in self._remembered]
        return remembered + self._files.renew([resource for resource in resources if resource not in remembered])

    def clean_expired(self) -> list[str]:
        return self._files.clean_expired()

    def write_out(self) -> bool:
        """Takes as files the locks held in memory; False when one is held elsewhere (tried again later)."""
        for resource in sorted(self._remembered):
            if not self._files.acquire(resource):
                return False
            self._remembered.discard(resource)
        return True
