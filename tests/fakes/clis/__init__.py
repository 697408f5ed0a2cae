"""Fake agent CLIs (claude, codex, gemini, ollama) and the `fake_clis` pytest fixture; facts in CLIS.md."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

FOLDER = Path(__file__).parent
NAMES = ("claude", "codex", "gemini", "ollama")


class FakeClis:
    """Handle on the fakes: where they live, what they were called with, how they behave next."""

    def __init__(self, state: Path, monkeypatch: pytest.MonkeyPatch):
        self.folder = FOLDER
        self.state = state
        self._monkeypatch = monkeypatch

    def path(self, name: str) -> str:
        """Absolute path of one fake executable."""
        return str(FOLDER / name)

    def calls(self, name: str | None = None) -> list[dict[str, Any]]:
        """Logged calls (argv, stdin, cwd, env, env_keys, …), oldest first; only `name`'s if given."""
        log = self.state / "calls.jsonl"
        if not log.exists():
            return []
        records = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]
        return [record for record in records if name is None or record["cli"] == name]

    def scenario(self, name: str | None, value: str) -> None:
        """Sets the scenario of one fake (`name`) or of all (None): ok, not_logged_in, hang, slow:2, …"""
        self._monkeypatch.setenv(_variable("SCENARIO", name), value)

    def answer(self, name: str | None, text: str) -> None:
        """Sets the answer text of one fake or of all (e.g. a selector decision as JSON)."""
        self._monkeypatch.setenv(_variable("ANSWER", name), text)

    def sessions(self, name: str) -> list[Path]:
        """Session files the fake `name` has stored."""
        return sorted((self.state / name).rglob("*.jsonl")) if (self.state / name).exists() else []


def _variable(kind: str, name: str | None) -> str:
    return f"FAKE_CLI_{kind}" if name is None else f"FAKE_CLI_{kind}_{name.upper()}"


def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeClis:
    """Puts the fakes first on PATH, gives them a fresh state dir, and clears any inherited FAKE_CLI_* setting."""
    for key in [key for key in os.environ if key.startswith("FAKE_CLI_")]:
        monkeypatch.delenv(key)
    state = tmp_path / "fake-cli-state"
    state.mkdir()
    monkeypatch.setenv("FAKE_CLI_STATE", str(state))
    monkeypatch.setenv("PATH", f"{FOLDER}{os.pathsep}{os.environ.get('PATH', '')}")
    return FakeClis(state, monkeypatch)


@pytest.fixture
def fake_clis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeClis]:
    """The fakes installed for one test (import this fixture into a conftest, or call `install` from your own)."""
    yield install(tmp_path, monkeypatch)
