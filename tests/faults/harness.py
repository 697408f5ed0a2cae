"""`switchyard run` as a process on a temporary home, driven through files (for the fault tests)."""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import yaml

from gateway.home import Home
from gateway.models import IncomingPayload
from gateway.testing import wait_until

REPO = Path(__file__).resolve().parents[2]
# No workflows: the built-in `rules` selector answers each message with `list_workflows`, in process.
FAST_ORCHESTRATOR = {"selector": {"provider": "rules"}, "diagnostics": {"provider": "rules"}, "workflows": {}}


def message(seq: int, conversation: str, text: str | None = None, **fields: Any) -> IncomingPayload:
    """A console-style message whose id names its conversation and sequence number."""
    values: dict[str, Any] = {"channel": "console", "channelProfileId": "console", "sender": "Ada",
                              "senderId": conversation, "message": text or f"hello {seq}",
                              "timestamp": 1_700_000_000_000 + seq, "messageId": f"{conversation}-{seq:05d}",
                              "conversationId": conversation}
    values.update(fields)
    return IncomingPayload(**values)


class GatewayRun:
    """Configures a home, starts / kills / stops `switchyard run`, and reads what it wrote."""

    started: ClassVar[list[GatewayRun]] = []  # killed after each test by tests/faults/conftest.py

    def __init__(self, root: Path, env: dict[str, str] | None = None, user: str | None = None,
                 log: Path | None = None):
        self.home = Home(root)
        self.env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
        self.env.pop("SWITCHYARD_HOME", None)
        self.env.update(PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1", **(env or {}))
        self.user = user
        self.process: subprocess.Popen[bytes] | None = None
        self.log = log or root.parent / f"{root.name}-run.log"
        self.dropped = 0

    def configure(self, queue: dict[str, Any] | None = None, orchestrator: dict[str, Any] | None = None,
                  **settings: Any) -> None:
        self.home.create()
        base: dict[str, Any] = {"queue": {"backoff_initial_ms": 50, "backoff_max_ms": 400, **(queue or {})},
                                "channels": [], **settings}
        self.home.settings_file.write_text(yaml.safe_dump(base))
        workspace = self.home.orchestrators / "main"
        workspace.mkdir(parents=True, exist_ok=True)
        (workspace / "orchestrator.yaml").write_text(yaml.safe_dump(orchestrator or FAST_ORCHESTRATOR))

    def start(self) -> None:
        before = self.count("gateway.started")
        argv = [sys.executable, "-m", "gateway.cli", "--home", str(self.home.root), "run"]
        if self.user:
            account = pwd.getpwnam(self.user)
            argv = ["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}", "--clear-groups", *argv]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(argv, cwd=REPO, env=self.env, stdin=subprocess.DEVNULL,
                                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        GatewayRun.started.append(self)
        wait_until(lambda: self.count("gateway.started") > before or not self.alive(), 30)
        assert self.alive(), f"switchyard run exited early:\n{self.output()[-3000:]}"

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crash or an OOM kill would end it."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(10)
        self.process = None

    def stop(self) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(30)
        self.process = None
        return code

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def drop(self, payload: IncomingPayload | bytes, name: str | None = None) -> str:
        """Writes a payload into incoming/ the way other programs must (`.tmp`, then rename)."""
        self.dropped += 1
        name = name or f"{self.dropped:07d}.json"
        data = payload if isinstance(payload, bytes) else payload.to_json()
        tmp = self.home.incoming / f"{name}.tmp"
        tmp.write_bytes(data)
        os.rename(tmp, self.home.incoming / name)
        return name

    def replies(self) -> list[dict[str, Any]]:
        """Every reply written (in outgoing/ or sent/), in the order they were written."""
        found = []
        for folder in (self.home.outgoing, self.home.sent):
            for path in folder.glob("*.json"):
                try:
                    found.append(json.loads(path.read_bytes()))
                except (OSError, ValueError):
                    continue
        return sorted(found, key=lambda reply: reply["timestamp"])

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        try:
            lines = self.home.events_file.read_bytes().splitlines()
        except FileNotFoundError:
            return []
        events = []
        for line in lines:
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
        return [e for e in events if name is None or e.get("event") == name]

    def count(self, name: str) -> int:
        return len(self.events(name))

    def queued_files(self) -> int:
        """Payload files still in incoming/ or processing/ (claimed, not yet answered)."""
        incoming = sum(1 for p in self.home.incoming.glob("*.json"))
        return incoming + sum(1 for p in self.home.processing.rglob("*.json"))
