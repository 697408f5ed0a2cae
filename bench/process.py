"""`switchyard run` as a child process on a bench home (for the scenarios measured from outside)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def wait_for(condition: Any, timeout: float, what: str) -> Any:
    """Polls `condition` every 10 ms until it returns something truthy; raises at the deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.01)
    raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")


def count_events(events_file: Path, name: str) -> int:
    """How many events called `name` the log holds."""
    try:
        lines = events_file.read_bytes().splitlines()
    except FileNotFoundError:
        return 0
    needle = f'"event": "{name}"'.encode()
    return sum(1 for line in lines if needle in line)


class GatewayProcess:
    """`with GatewayProcess(home) as gw`: starts `python -m gateway.cli --home H run`, waits until it
    has started, and stops it with SIGTERM on exit."""

    def __init__(self, root: Path, *, env: dict[str, str] | None = None, plugins: str = "bench.plugin"):
        self.root = root
        self.env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
        self.env.update(PYTHONPATH=str(REPO), SWITCHYARD_PLUGINS=plugins, **(env or {}))
        self.env.pop("SWITCHYARD_HOME", None)
        self.process: subprocess.Popen[bytes] | None = None
        self.log = root / "run.log"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def __enter__(self) -> GatewayProcess:
        events = self.root / "logs" / "events.jsonl"
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", "--home", str(self.root), "run"], cwd=REPO, env=self.env,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        wait_for(lambda: count_events(events, "gateway.started") or self.process.poll() is not None,
                 60, "gateway.started")
        if self.process.poll() is not None:
            raise RuntimeError(f"switchyard run exited early:\n{self.log.read_text()[-3000:]}")
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.process is None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


def cpu_split(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process so far (from /proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    return sum(cpu_split(pid))


def memory_kib(pid: int) -> dict[str, int]:
    """Resident set size now and at its peak (VmRSS, VmHWM), in KiB."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0])
    return found


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data))
