"""Agents a killed gateway left running: found by the mark their environment carries, stopped at the next start.

claude-agent-acp and codex-acp do not exit when their stdin closes (tests/fakes/acp/FINDINGS.md), so a gateway
killed with SIGKILL (or by the OOM killer) leaves its warm agents running for good, a few hundred MB each. Every
agent process is started with `MARK` = `<home>|<gateway pid>|<gateway start time>` in its environment (inherited
by its children); `reap_orphans` kills the process group of every process that carries this home's mark for a
gateway that no longer runs (a pid now held by another process counts as gone: its start time differs).
"""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

log = logging.getLogger(__name__)

MARK = "SWITCHYARD_AGENT_OF"
PROC = Path("/proc")


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22), None when it is gone."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()[19]


def mark_of(home: Path) -> str:
    """This gateway's mark for the agents it starts."""
    return f"{home}|{os.getpid()}|{start_time(os.getpid())}"


def _mark_in(pid: int) -> str | None:
    """The mark in a process's environment, if it carries one (None: none, or not ours to read)."""
    try:
        environ = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    prefix = f"{MARK}=".encode()
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix):].decode(errors="replace")
    return None


def _gone(owner_pid: str, owner_start: str) -> bool:
    return not owner_pid.isdigit() or start_time(int(owner_pid)) != owner_start


def reap_orphans(home: Path) -> int:
    """Kills the process groups of agents this home's gateways started and left behind (their gateway gone);
    returns how many groups. Linux only (elsewhere: 0)."""
    if not PROC.is_dir():
        return 0
    own_group = os.getpgrp()
    groups: set[int] = set()
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        mark = _mark_in(int(entry.name))
        if mark is None:
            continue
        parts = mark.rsplit("|", 2)
        if len(parts) != 3 or parts[0] != str(home) or not _gone(parts[1], parts[2]):
            continue
        try:
            group = os.getpgid(int(entry.name))
        except OSError:
            continue
        if group != own_group:
            groups.add(group)
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except OSError:
            continue
        log.warning("stopped agent process group %d left running by a gateway that was killed", group)
    return len(groups)
