"""Process containment: what a provider run started is killed and reaped when the run ends.

A run's processes are its process group plus every process carrying the run's token in its
environment. The gateway makes itself a child subreaper (Linux), so a process that leaves the
group with setsid() and is orphaned is re-parented to the gateway instead of init, and can be
found among the gateway's descendants. Not contained: a process that scrubs its environment and
also leaves the group (or is re-parented elsewhere, as when the subreaper could not be set). What a gateway
killed with SIGKILL left running is ended by the next one of its home (gateway/runtime/orphans.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping

from gateway.runtime.orphans import TOKEN_VAR, new_token
from gateway.runtime.procfs import ProcStat, proc_stat

log = logging.getLogger("switchyard.containment")

PR_SET_CHILD_SUBREAPER = 36
REAP_WAIT_S = 2.0
REAP_POLL_S = 0.01


def become_subreaper() -> bool:
    """Makes this process adopt its orphaned descendants (Linux); logs once and returns False if it cannot."""
    if not sys.platform.startswith("linux"):
        log.warning("process containment: no child subreaper on %s; a setsid() child may outlive its run",
                    sys.platform)
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    except (OSError, AttributeError) as exc:
        log.warning("process containment: cannot become a child subreaper (%s); a setsid() child may outlive "
                    "its run", exc)
        return False
    return True


def supervise_children() -> None:
    """What a gateway process sets up once for the processes it starts: it adopts their orphans
    (`become_subreaper`) and, on Python 3.11, learns of their exits through pidfds on the running loop."""
    become_subreaper()
    if sys.version_info < (3, 12) and hasattr(os, "pidfd_open"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            asyncio.set_child_watcher(_PidfdWatcher())


class _PidfdWatcher(asyncio.AbstractChildWatcher):
    """Python 3.12's way of awaiting a child's exit, for 3.11: a pidfd read by the loop that started the
    child. 3.11's default starts a thread per child to block in waitpid() (about a third of the CPU a
    spawn costs the gateway, measured: 0.62 → 0.44 ms per spawn of /bin/true), and its own
    PidfdChildWatcher serves one loop, where tests run loops in several threads."""

    def __init__(self) -> None:
        self._threaded = asyncio.ThreadedChildWatcher()  # when no pidfd can be had (out of descriptors, say)

    def add_child_handler(self, pid: int, callback: Callable[..., object], *args: object) -> None:
        loop = asyncio.get_running_loop()
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            self._threaded.add_child_handler(pid, callback, *args)
            return
        loop.add_reader(pidfd, self._exited, loop, pidfd, pid, callback, args)

    @staticmethod
    def _exited(loop: asyncio.AbstractEventLoop, pidfd: int, pid: int, callback: Callable[..., object],
                args: tuple[object, ...]) -> None:
        loop.remove_reader(pidfd)
        os.close(pidfd)
        try:
            returncode = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        except ChildProcessError:  # reaped elsewhere (containment reaps only descendants it adopted)
            returncode = 255
        callback(pid, returncode, *args)

    def remove_child_handler(self, pid: int) -> bool:
        return False  # asyncio calls it only for a child it could not start, before any handler was added

    def attach_loop(self, loop: asyncio.AbstractEventLoop | None) -> None:
        return None

    def close(self) -> None:
        return None

    def is_active(self) -> bool:
        return True

    def __enter__(self) -> _PidfdWatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def tagged(env: Mapping[str, str]) -> tuple[dict[str, str], str]:
    """A run's environment with a fresh token every process it starts inherits, and the token (it names the
    gateway process that claimed a home: gateway/runtime/orphans.py)."""
    token = new_token()
    return {**env, TOKEN_VAR: token}, token


async def end_run(leader: int, token: str) -> None:
    """Kills the run's process group and every descendant carrying its token, and reaps the ones
    re-parented to us. Call it once the leader itself has been reaped (asyncio owns its exit status)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(leader, signal.SIGKILL)
    if not _has_children():  # its descendants would be ours now (a subreaper): none, so nothing left
        return
    marker = f"{TOKEN_VAR}={token}".encode()
    seen: set[tuple[int, int]] = set()
    deadline = time.monotonic() + REAP_WAIT_S
    while True:
        left = [proc for proc in _descendants(os.getpid()) if proc.pid != leader
                and ((proc.pid, proc.started) in seen or proc.pgrp == leader or _carries(proc.pid, marker))]
        for proc in left:
            seen.add((proc.pid, proc.started))
            _kill_and_reap(proc)
        if not left or time.monotonic() > deadline:
            return
        await asyncio.sleep(REAP_POLL_S)


def _has_children() -> bool:
    """Whether this process has any child, live or not yet reaped (one waitid() call: walking /proc reads a
    file per thread); reaps nothing."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


def _kill_and_reap(proc: ProcStat) -> None:
    if not proc.zombie:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(proc.pid, signal.SIGKILL)
    if proc.ppid == os.getpid():
        with contextlib.suppress(ChildProcessError):
            os.waitpid(proc.pid, os.WNOHANG)


def _carries(pid: int, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return marker in handle.read().split(b"\0")
    except OSError:
        return False


def _descendants(root: int) -> Iterator[ProcStat]:
    """Every live or zombie descendant of `root`, through /proc/<pid>/task/<tid>/children."""
    stack = _children(root)
    while stack:
        pid = stack.pop()
        proc = proc_stat(pid)
        if proc is not None:
            yield proc
            stack.extend(_children(pid))


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as handle:
                found.extend(int(child) for child in handle.read().split())
        except OSError:
            continue
    return found
