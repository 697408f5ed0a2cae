"""End-to-end harness: `switchyard run` as a real process on a temporary home, fake provider CLIs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.home import Home
from gateway.testing import drop_incoming, make_incoming, wait_until

PROVIDERS = Path(__file__).parent / "providers"
SWITCHYARD = str(Path(sys.executable).parent / "switchyard")

ORCHESTRATOR: dict[str, Any] = {
    "selector": {"provider": "fake_selector"},
    "diagnostics": {"provider": "fake_diagnostics"},
    "reply_within_sec": 5,
    "agents": {"writer": {"provider": "fake_agent", "prompt": "write about {{message}}"}},
    "workflows": {
        "chat": {"description": "Reply to a chat message", "steps": [{"id": "Reply", "agent": "writer"}]},
        "build": {"description": "Plan, build and test", "steps": [
            {"id": "Plan", "agent": "writer"},
            {"id": "Build", "command": [sys.executable, "-c", "print('built ok')"]},
            {"id": "Test", "agent": "writer"},
        ]},
    },
    "functions": {"shout": {"description": "Upper-cases a word",
                            "parameters": {"type": "object", "required": ["word"],
                                           "properties": {"word": {"type": "string"}}},
                            "command": [sys.executable, "-c",
                                        "import json,sys; print(json.load(sys.stdin)['word'].upper())"]}},
}


class Switchyard:
    """One `switchyard run` process on a home, and helpers to talk to it through files."""

    def __init__(self, root: Path, env: dict[str, str]):
        self.home = Home(root)
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = root / "run.log"

    def configure(self, settings: dict[str, Any] | None = None, orchestrator: dict[str, Any] | None = None) -> None:
        self.home.create()
        base: dict[str, Any] = {
            "queue": {"max_attempts": 3, "backoff_initial_ms": 50, "backoff_max_ms": 200, "fsync": False},
            "providers": {
                "fake_selector": {"command": [sys.executable, str(PROVIDERS / "selector.py")], "timeout_sec": 30},
                "fake_agent": {"command": [sys.executable, str(PROVIDERS / "agent.py")], "timeout_sec": 30},
                "fake_diagnostics": {"command": [sys.executable, str(PROVIDERS / "diagnostics.py")]},
            },
            "channels": [],
        }
        base.update(settings or {})
        self.home.settings_file.write_text(yaml.safe_dump(base))
        workspace = self.home.orchestrators / "main"
        workspace.mkdir(parents=True, exist_ok=True)
        (workspace / "orchestrator.yaml").write_text(yaml.safe_dump(orchestrator or ORCHESTRATOR))

    def start(self) -> None:
        started_before = self.count_events("gateway.started")
        log = self.log_path.open("ab")
        self.process = subprocess.Popen([SWITCHYARD, "--home", str(self.home.root), "run"], env=self.env,
                                        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        wait_until(lambda: self.count_events("gateway.started") > started_before or self._died(), 20)
        assert self.process.poll() is None, f"switchyard exited early:\n{self.log_path.read_text()}"

    def _died(self) -> bool:
        return self.process is not None and self.process.poll() is not None

    def stop(self) -> int:
        """SIGTERM, then the exit code (it must exit by itself)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(30)
        self.process = None
        return code

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(10)
        self.process = None

    def send(self, text: str, **fields: Any) -> dict[str, Any]:
        payload = make_incoming(text, **fields)
        drop_incoming(self.home, payload, f"{time.time_ns()}-{payload.messageId}.json")
        return payload.model_dump(exclude_none=True)

    def replies(self, message_id: str | None = None) -> list[dict[str, Any]]:
        found = []
        for folder in (self.home.outgoing, self.home.sent):
            for path in folder.glob("*.json"):
                try:
                    data = json.loads(path.read_bytes())
                except ValueError:
                    continue
                data["_file"] = path.name
                if message_id is None or data.get("messageId") == message_id:
                    found.append(data)
        return sorted(found, key=lambda r: r["timestamp"])

    def reply_to(self, message_id: str, count: int = 1, timeout: float = 20) -> list[dict[str, Any]]:
        return wait_until(lambda: (r := self.replies(message_id)) and len(r) >= count and r, timeout)

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        try:
            lines = self.home.events_file.read_text().splitlines()
        except FileNotFoundError:
            return []
        events: list[dict[str, Any]] = [json.loads(line) for line in lines if line.strip()]
        return [e for e in events if name is None or e["event"] == name]

    def count_events(self, name: str) -> int:
        return len(self.events(name))

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([SWITCHYARD, "--home", str(self.home.root), *args], env=self.env,
                              capture_output=True, text=True, timeout=60)


@pytest.fixture
def fake_log(tmp_path: Path) -> Path:
    return tmp_path / "provider-calls.jsonl"


@pytest.fixture
def switchyard(tmp_path: Path, fake_log: Path) -> Iterator[Switchyard]:
    state = tmp_path / "fake-state"
    state.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.update(FAKE_LOG=str(fake_log), FAKE_STATE=str(state), PYTHONUNBUFFERED="1")
    env.pop("SWITCHYARD_HOME", None)
    instance = Switchyard(tmp_path / "home", env)
    yield instance
    if instance.process is not None:
        instance.process.kill()
        instance.process.wait(10)


def provider_calls(fake_log: Path) -> list[dict[str, Any]]:
    if not fake_log.exists():
        return []
    return [json.loads(line) for line in fake_log.read_text().splitlines() if line.strip()]
