"""`switchyard run` as a real process on a temporary home, read back through the files it writes.

The base of the end-to-end harness (tests/e2e/conftest.py) and the fault harness
(tests/faults/harness.py): start, stop, kill, and the replies and events on disk.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gateway.events import read_events
from gateway.home import Home
from gateway.testing import wait_until

SWITCHYARD = str(Path(sys.executable).parent / "switchyard")
START_TIMEOUT_S = 30.0


def clean_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without proxy variables or SWITCHYARD_HOME, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.pop("SWITCHYARD_HOME", None)
    env.update(PYTHONUNBUFFERED="1", **(extra or {}))
    return env


class SwitchyardProcess:
    """One `switchyard run` on a home: started in its own session, its output kept in a log file."""

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
