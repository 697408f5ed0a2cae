"""`switchyard run` as a real process on a temporary home, read back through the files it writes.

The base of the end-to-end harness (tests/e2e/conftest.py) and the fault harness
(tests/faults/harness.py): start, stop, kill, and the replies and events on disk.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from gateway.home import Home
from gateway.telemetry.events import read_events
from gateway.testing import wait_until

SWITCHYARD = str(Path(sys.executable).parent / "switchyard")
START_TIMEOUT_S = 30.0
# Set by tests/conftest.py in the suite's environment, so every process it starts (and their children)
# carries them: this run's token (what the end-of-suite check looks for) and the test that started it.
TEST_RUN_VARIABLE = "SY_TEST_RUN"
TEST_NODE_VARIABLE = "SY_TEST_NODE"


def clean_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without proxy variables or SWITCHYARD_HOME, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.pop("SWITCHYARD_HOME", None)
    env.update(PYTHONUNBUFFERED="1", **(extra or {}))
    return env


def _stat(pid: int) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name (state, ppid, pgrp, session, ...); [] when gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return []
    return raw[raw.rfind(")") + 2:].split()


def _pids() -> list[int]:
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]


def session_members(session: int) -> list[int]:
    """The live (not zombie) processes of a session, its leader included."""
    return [pid for pid in _pids() if (fields := _stat(pid)) and fields[3] == str(session) and fields[0] != "Z"]


def kill_session(session: int, timeout_s: float = 10.0) -> None:
    """SIGKILLs every process of a session (whatever process group it moved to) and waits until none is left."""
    deadline = time.monotonic() + timeout_s
    while members := session_members(session):
        for pid in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        assert time.monotonic() < deadline, f"processes of session {session} outlived SIGKILL: {members}"
        time.sleep(0.02)


def marked_processes(token: str) -> dict[int, str]:
    """Live processes (other than this one) whose environment carries this run's token: pid -> the test that
    started it and its command line."""
    found = {}
    needle = f"{TEST_RUN_VARIABLE}={token}".encode()
    for pid in _pids():
        if pid == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if needle in environ and (_stat(pid)[:1] or ["Z"])[0] != "Z":
            node = next((v.decode(errors="replace").partition("=")[2] for v in environ
                         if v.startswith(TEST_NODE_VARIABLE.encode() + b"=")), "(no test)")
            found[pid] = f"{node}: {argv.strip()}"
    return found


class SwitchyardProcess:
    """One `switchyard run` on a home: started in its own session, its output kept in a log file."""

    started: ClassVar[list[SwitchyardProcess]] = []  # killed after each test by tests/conftest.py

    def __init__(self, root: Path, env: dict[str, str], *, log: Path):
        self.home = Home(root)
        self.env = env
        self.log_path = log
        self.process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        """The argv that starts the gateway (the installed console script)."""
        return [SWITCHYARD, "--home", str(self.home.root), "run"]

    def start(self) -> None:
        """Starts the process and waits for its `gateway.started` event."""
        before = self.count("gateway.started")
        SwitchyardProcess.started.append(self)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(self.command(), env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        wait_until(lambda: self.count("gateway.started") > before or not self.alive(), START_TIMEOUT_S)
        assert self.alive(), f"switchyard run exited early:\n{self.output()[-3000:]}"

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> int:
        """SIGTERM, then the exit code (it must exit by itself)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(30)
        self.process = None
        return code

    def kill(self) -> None:
        """SIGKILL, as a crash or an OOM kill would end it."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(10)
        self.process = None

    def kill_group(self) -> None:
        """SIGKILLs the process and its process group (the providers it started) if it is still running."""
        if self.alive():
            assert self.process is not None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        self.process = None

    @classmethod
    def kill_started(cls) -> None:
        """Kills every process started since the last call that still runs (the end of a test)."""
        for run in cls.started:
            run.kill_group()
        cls.started.clear()

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def replies(self, message_id: str | None = None) -> list[dict[str, Any]]:
        """Replies written (in outgoing/ or sent/) in the order they were written, with their file
        name under `_file`; only those answering `message_id` when given."""
        found = []
        for folder in (self.home.outgoing, self.home.sent):
            for path in folder.glob("*.json"):
                try:
                    data = json.loads(path.read_bytes())
                except (OSError, ValueError):  # moved to sent/ meanwhile, or still being written
                    continue
                data["_file"] = path.name
                if message_id is None or data.get("messageId") == message_id:
                    found.append(data)
        return sorted(found, key=lambda reply: reply["timestamp"])

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """The event log's events (only those called `name` when given); a torn last line is skipped."""
        return [e for e in read_events(self.home.events_file) if name is None or e.get("event") == name]

    def count(self, name: str) -> int:
        return len(self.events(name))


def pid_alive(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie, waiting only for its parent to reap it, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
