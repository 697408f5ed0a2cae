"""Process containment: what a provider run started is killed and reaped when the run ends.

A run's processes are its process group plus every process carrying the run's token in its
environment. The gateway makes itself a child subreaper (Linux), so a process that leaves the
group with setsid() and is orphaned is re-parented to the gateway instead of init, and can be
found among the gateway's descendants. Not contained: a process that scrubs its environment and
also leaves the group (or is re-parented elsewhere, as when the subreaper could not be set).
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
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

log = logging.getLogger("switchyard.containment")

TOKEN_VAR = "SWITCHYARD_PROC_TOKEN"
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


def tagged(env: Mapping[str, str]) -> tuple[dict[str, str], str]:
    """A run's environment with a fresh token every process it starts inherits, and the token."""
    token = uuid.uuid4().hex
    return {**env, TOKEN_VAR: token}, token


@dataclass(frozen=True)
class _Proc:
    pid: int
    ppid: int
    pgrp: int
    started: int
    zombie: bool


async def end_run(leader: int, token: str) -> None:
    """Kills the run's process group and every descendant carrying its token, and reaps the ones
    re-parented to us. Call it once the leader itself has been reaped (asyncio owns its exit status)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(leader, signal.SIGKILL)
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


def _kill_and_reap(proc: _Proc) -> None:
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


def _descendants(root: int) -> Iterator[_Proc]:
    """Every live or zombie descendant of `root`, through /proc/<pid>/task/<tid>/children."""
    stack = _children(root)
    while stack:
        pid = stack.pop()
        proc = _stat(pid)
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


def _stat(pid: int) -> _Proc | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return _Proc(pid, int(fields[1]), int(fields[2]), int(fields[19]), fields[0] == b"Z")
