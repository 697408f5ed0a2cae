"""End-to-end harness: `switchyard run` as a real process on a temporary home, fake provider CLIs."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.testing import drop_incoming, make_incoming, wait_until
from tests.process import SWITCHYARD, SwitchyardProcess, clean_environment

PROVIDERS = Path(__file__).parent / "providers"

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


class Switchyard(SwitchyardProcess):
    """One `switchyard run` process on a home, and helpers to talk to it through files."""

    def __init__(self, root: Path, env: dict[str, str]):
        super().__init__(root, env, log=root / "run.log")

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

    def send(self, text: str, **fields: Any) -> dict[str, Any]:
        payload = make_incoming(text, **fields)
        drop_incoming(self.home, payload, f"{time.time_ns()}-{payload.messageId}.json")
        return payload.model_dump(exclude_none=True)

    def reply_to(self, message_id: str, count: int = 1, timeout: float = 20) -> list[dict[str, Any]]:
        return wait_until(lambda: (r := self.replies(message_id)) and len(r) >= count and r, timeout)

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
    env = clean_environment({"FAKE_LOG": str(fake_log), "FAKE_STATE": str(state)})
    instance = Switchyard(tmp_path / "home", env)
    yield instance
    if instance.process is not None:
        instance.process.kill()
        instance.process.wait(10)


def provider_calls(fake_log: Path) -> list[dict[str, Any]]:
    if not fake_log.exists():
        return []
    return [json.loads(line) for line in fake_log.read_text().splitlines() if line.strip()]
