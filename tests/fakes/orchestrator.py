"""Helpers shared by orchestrator tests: a fake outbox, a polling wait, message factory, settings without chat tools."""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.home import Home
from gateway.models import IncomingPayload, OutgoingPayload
from gateway.settings import ChatToolsSettings, ProviderSettings
from gateway.telemetry.events import read_events
from gateway.testing import async_wait_until
from orchestrator.runs.state import RunState
from orchestrator.storage.files.runs import RunStore

NO_CHAT_TOOLS = ChatToolsSettings(enabled=False)
"""`Settings(chat_tools=…)` of a unit test's gateway or orchestrator whose turns need no chat tools: their HTTP
server takes a fifth of a second to stop (uvicorn's shutdown ticks), after every such test."""

REMOTE_AGENT_CONFIG = """
selector: {provider: rules}
diagnostics: {provider: rules}
reply_within_sec: 60
rules: {default_workflow: chat}
agents:
  helper: {provider: remote, prompt: "{{message}}"}
workflows:
  chat:
    description: Talk with the helper agent
    steps:
      - {id: Reply, agent: helper}
"""
"""orchestrator.yaml whose chat workflow is one step of the agent behind the provider named `remote`."""

API_PREFIX = {"claude": "/anthropic", "codex": "/openai/v1", "gemini": "/google"}
"""Where the fake model server (tests/fakes/model_server.py) answers each real CLI's API."""
AGENT_VARIABLES = ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "CODEX_HOME", "GEMINI_API_KEY",
                   "GOOGLE_GEMINI_BASE_URL", "GEMINI_CLI_HOME", "CLAUDE_CONFIG_DIR")


def isolate_real_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, key: str) -> Path:
    """For a test running a real agent CLI: a HOME of the test's own (returned), `key` in `variable`, and none of
    the user's agent variables (so nothing of the machine's own logins or endpoints is used)."""
    user_home = tmp_path / "user-home"
    user_home.mkdir()
    monkeypatch.setenv("HOME", str(user_home))
    monkeypatch.setenv(variable, key)
    for name in AGENT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return user_home


class FakeOutbox:
    """Records pushed payloads instead of writing them into queue/outgoing/."""

    def __init__(self) -> None:
        self.payloads: list[OutgoingPayload] = []

    def write(self, payload: OutgoingPayload) -> Path:
        self.payloads.append(payload)
        return Path(f"/fake/outgoing/{len(self.payloads)}.json")

    def holds_result(self, run_id: str, run_state: str, *, channel: str, message_id: str) -> bool:
        # a payload without a runState (a progress note of the same run) holds no result: no AttributeError
        return any(p.workflowRunId == run_id and getattr(p, "runState", None) == run_state for p in self.payloads)


_ids = itertools.count(1)


def make_message(text: str, **fields: Any) -> IncomingPayload:
    """An incoming console message with a fresh messageId."""
    number = next(_ids)
    base: dict[str, Any] = {"channel": "console", "channelProfileId": "console", "sender": "Ada",
                            "senderId": "ada", "message": text, "timestamp": 1_700_000_000_000 + number,
                            "messageId": f"m{number}", "conversationId": "c1"}
    return IncomingPayload(**{**base, **fields})


class ScriptedSelector:
    """A selector provider whose next answer the test writes (`answer(...)`)."""

    def __init__(self, tmp_path: Path, script: Callable[[str, str], list[str]]):
        self.answer_file = tmp_path / "selector_answer.txt"
        self.calls_file = tmp_path / "selector_calls.txt"
        argv = script("scripted_selector", """
            import sys
            request = sys.stdin.read()
            with open(sys.argv[2] + ".requests", "a") as requests:
                requests.write(request)
            with open(sys.argv[2], "a") as calls:
                calls.write("call\\n")
            print(open(sys.argv[1]).read())
        """)
        self.provider = ProviderSettings(command=[*argv, str(self.answer_file), str(self.calls_file)])

    def answer(self, decision: dict[str, Any] | str) -> None:
        text = decision if isinstance(decision, str) else json.dumps(decision)
        self.answer_file.write_text(text, encoding="utf-8")

    def requests(self) -> str:
        """What the selector was given on stdin, every call."""
        path = self.calls_file.with_name(self.calls_file.name + ".requests")
        return path.read_text(encoding="utf-8") if path.exists() else ""

    @property
    def calls(self) -> int:
        return len(self.calls_file.read_text().splitlines()) if self.calls_file.exists() else 0


PY = json.dumps(sys.executable)


class Flow:
    """An orchestrator started on a test home, with helpers to read runs and their job events."""

    def __init__(self, orchestrator: Any, home: Path, outbox: FakeOutbox):
        self.orchestrator = orchestrator
        self.home = home
        self.outbox = outbox
        self.store = RunStore(Home(home), fsync=False)

    async def send(self, text: str, **fields: Any) -> tuple[OutgoingPayload, IncomingPayload]:
        message = make_message(text, **fields)
        [answer] = await self.orchestrator.handle(message)
        return answer, message

    def run(self, run_id: str) -> RunState:
        run = self.store.load(run_id)
        assert run is not None, f"no run {run_id}"
        return run

    async def settled(self, run_id: str, timeout_s: float = 15.0) -> RunState:
        """Waits until the run is finished and its result delivered."""
        await async_wait_until(lambda: (r := self.store.load(run_id)) is not None and r.finished and r.delivery,
                               timeout_s)
        return self.run(run_id)

    def job_events(self, run_id: str) -> list[dict[str, Any]]:
        return [e for e in read_events(self.home / "logs" / "events.jsonl")
                if e.get("job_id") == run_id and str(e.get("event", "")).startswith("job.")]
