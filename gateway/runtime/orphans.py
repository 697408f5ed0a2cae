"""What a killed gateway process left running: found by its runs' tokens, ended by a live gateway of its home.

A run's processes carry its token in their environment (containment.TOKEN_VAR). Once a gateway process has
`claim`ed its home, every token it hands out names it: `<home id>:<pid namespace>:<pid>:<start time>:<uuid>`,
the home id a short hash of the home's resolved path, the start time the process's own (/proc/<pid>/stat), so a
pid reused by another process is not taken for the owner. An agent CLI runs in a session of its own (so that
/stop can end its group), so a gateway killed with SIGKILL leaves it running; `sweep` finds the processes of this
user that carry a token of this home whose owner no longer runs, and ends their process groups (SIGTERM, a short
grace, SIGKILL). A process whose owner runs is never touched, whichever gateway process that is (`run` and
`worker` on one home, or another host's, whose processes this host does not see). Not found: a process that
cleared its environment, or runs in another pid namespace than its owner's token says (its pids mean nothing
here). Linux only; elsewhere the sweep finds nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.runtime.procfs import pids, proc_stat

if TYPE_CHECKING:
    from gateway.telemetry.events import EventLog

log = logging.getLogger("switchyard.containment")

TOKEN_VAR = "SWITCHYARD_PROC_TOKEN"
ENDED_EVENT = "process.orphan_ended"
HOME_ID_CHARS = 12
TERM_GRACE_S = 2.0  # how long a group has between SIGTERM and SIGKILL
POLL_S = 0.02
PROC = Path("/proc")
READ_CHUNK = 1 << 20


@dataclass(frozen=True)
class Owner:
    """The gateway process a token names."""

    home: str
    namespace: str
    pid: int
    started: str

    def label(self) -> str:
        return f"{self.home}:{self.namespace}:{self.pid}:{self.started}"

    @classmethod
    def of_token(cls, token: str) -> Owner | None:
        """The owner a token names (None: a token handed out before any claim, or no token of ours)."""
        parts = token.split(":")
        if len(parts) != 5 or not parts[2].isdigit():
            return None
        return cls(parts[0], parts[1], int(parts[2]), parts[3])

    def gone(self) -> bool:
        """Whether the owner no longer runs: its pid free, held by a process started at another time, or a zombie
        (dead, its parent has not reaped it yet)."""
        stat = proc_stat(self.pid)
        return stat is None or str(stat.started) != self.started or stat.zombie


@dataclass(frozen=True)
class Orphan:
    """A process group a dead gateway left running: its id, the first program found in it, its owner's pid."""

    group: int
    program: str
    owner_pid: int


_claimed: Owner | None = None


def home_id(root: Path) -> str:
    return hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:HOME_ID_CHARS]


def start_time(pid: int) -> str | None:
    """A process's start time in clock ticks since boot (/proc/<pid>/stat field 22); None when it is gone."""
    stat = proc_stat(pid)
    return None if stat is None else str(stat.started)


def pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid").removeprefix("pid:[").removesuffix("]")
    except OSError:
        return "-"


def claim(root: Path) -> Owner:
    """Makes this process the owner every token from now on names, for the home at `root` (a gateway process
    calls it once; the last call wins)."""
    global _claimed
    _claimed = Owner(home_id(root), pid_namespace(), os.getpid(), start_time(os.getpid()) or "-")
    return _claimed


def new_token() -> str:
    """A fresh token for a run: naming this process and its home once claimed, else a bare uuid (never swept)."""
    return uuid.uuid4().hex if _claimed is None else f"{_claimed.label()}:{uuid.uuid4().hex}"


def sweep(root: Path, events: EventLog | None = None) -> list[Orphan]:
    """Ends the process groups that dead gateway processes of the home at `root` left running on this host,
    emits `process.orphan_ended` for each and returns them. Blocks up to TERM_GRACE_S when it found any."""
    found = find(root)
    if found:
        end([orphan.group for orphan in found])
    for orphan in found:
        log.warning("ended process group %d (%s) left running by gateway process %d, which is gone",
                    orphan.group, orphan.program, orphan.owner_pid)
        if events is not None:
            events.emit(ENDED_EVENT, pid=orphan.group, program=orphan.program, owner_pid=orphan.owner_pid)
    return found


def find(root: Path) -> list[Orphan]:
    """The process groups of this user's processes that carry a token of this home whose owner is gone."""
    wanted, namespace, uid = home_id(root), pid_namespace(), os.getuid()
    own = {os.getpid(), os.getpgrp()}
    groups: dict[int, Orphan] = {}
    for pid in pids():
        token = _token_of(pid, uid)
        owner = None if token is None else Owner.of_token(token)
        if owner is None or owner.home != wanted or owner.namespace != namespace or not owner.gone():
            continue
        with contextlib.suppress(OSError):
            group = os.getpgid(pid)
            if group not in own and group not in groups:
                groups[group] = Orphan(group, _program(pid), owner.pid)
    return list(groups.values())


def end(groups: list[int]) -> None:
    """SIGTERM to each group, then SIGKILL to what is left of them after TERM_GRACE_S; returns once none has a
    live member (or after another TERM_GRACE_S)."""
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGTERM)
    deadline = time.monotonic() + TERM_GRACE_S
    while _alive_in(groups) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    for group in _alive_in(groups):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    deadline = time.monotonic() + TERM_GRACE_S
    while _alive_in(groups) and time.monotonic() < deadline:
        time.sleep(POLL_S)


def _alive_in(groups: list[int]) -> set[int]:
    """Which of `groups` still have a live member (a zombie is not: it waits for its parent, init or a subreaper,
    to reap it; this process reaps nothing it did not start itself)."""
    alive: set[int] = set()
    for pid in pids():
        stat = proc_stat(pid)
        if stat is not None and not stat.zombie and stat.pgrp in groups:
            alive.add(stat.pgrp)
    return alive


def _token_of(pid: int, uid: int) -> str | None:
    """The token in a process's environment, if it is this user's and carries one."""
    prefix = f"{TOKEN_VAR}=".encode()
    try:
        fd = os.open(f"/proc/{pid}/environ", os.O_RDONLY)
    except OSError:  # gone, or another user's
        return None
    try:
        if os.fstat(fd).st_uid != uid:
            return None
        environ = b"".join(iter(lambda: os.read(fd, READ_CHUNK), b""))
    except OSError:
        return None
    finally:
        os.close(fd)
    if prefix not in environ:  # the common case, without splitting every environment
        return None
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix):].decode(errors="replace")
    return None


def _program(pid: int) -> str:
    """A process's argv[0] (never more of its command line: an argument may be a prompt)."""
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
    except OSError:
        return "?"
