"""What Linux's /proc says of a process, read the one way both containment (a run's descendants) and the orphan
sweep (what a dead gateway left) read it: a missing or unreadable entry is None, never an error."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class ProcStat:
    """The fields of /proc/<pid>/stat the gateway uses."""

    pid: int
    ppid: int
    pgrp: int
    started: int
    """Clock ticks since boot when it started (field 22): with the pid, a process's identity (pids are reused)."""
    zombie: bool


def proc_stat(pid: int) -> ProcStat | None:
    """The process's stat; None when it is gone (or /proc has no such entry)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()  # the name before ")" may hold spaces
        return ProcStat(pid, int(fields[1]), int(fields[2]), int(fields[19]), fields[0] == b"Z")
    except (OSError, IndexError, ValueError):
        return None


def pids() -> list[int]:
    """Every process id /proc lists now."""
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []
