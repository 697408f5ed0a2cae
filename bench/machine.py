"""The facts of the machine a benchmark ran on: CPU, Python, file system."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Any


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (or the platform's guess)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def filesystem_of(path: Path) -> str:
    """The mount point, file-system type and device holding `path` (from /proc/mounts)."""
    real = str(path.resolve())
    best = ("", "unknown", "unknown")
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return "unknown"
    for line in lines:
        device, mount, fstype = line.split()[:3]
        inside = real == mount or real.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best[0]):
            best = (mount, fstype, device)
    return f"{best[1]} on {best[2]} (mounted at {best[0]})"


def machine_facts(bench_dir: Path) -> dict[str, Any]:
    """CPU, core count, memory, kernel, Python and the file system the bench writes to."""
    memory = "unknown"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory = f"{int(line.split()[1]) // 1024} MiB"
    except OSError:
        pass
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "memory": memory,
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "filesystem": filesystem_of(bench_dir),
        "bench_dir": str(bench_dir),
    }
