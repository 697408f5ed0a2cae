"""How live sessions are wired: settings validation, the fallback to one-shot, and the handler's stop."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from gateway.api import HandlerContext
from gateway.home import Home
from gateway.settings import ProviderSettings
from gateway.telemetry.events import EventLog
from orchestrator.agents.clis.runner import ProviderRefused
from orchestrator.agents.providers import ProviderRunner
from orchestrator.agents.request import TurnRequest
from tests.fakes.acp.helpers import CONV, any_alive, fake_provider, kill_left
from tests.fakes.stores import file_sessions, orchestrator_for


def test_transport_acp_is_only_for_the_three_presets() -> None:
    with pytest.raises(ValidationError, match="transport: acp is only for"):
        ProviderSettings(type="ollama", transport="acp")
    with pytest.raises(ValidationError, match="transport: acp is only for"):
        ProviderSettings(command=["x"], transport="acp")
    with pytest.raises(ValidationError, match="acp_command: only with"):
        ProviderSettings(type="codex", acp_command=["codex-acp"])
    with pytest.raises(ValidationError, match="permissions"):
        ProviderSettings(type="codex", transport="acp", permissions="maybe")  # type: ignore[arg-type]
    assert ProviderSettings(type="gemini", transport="acp").max_live == 8


@pytest.mark.parametrize("adapter", [["/nowhere/claude-agent-acp"], [sys.executable, "-c", "raise SystemExit(3)"]],
                         ids=["missing", "exits"])
async def test_an_unusable_adapter_falls_back_to_the_one_shot_preset(home: Home, events: EventLog, tmp_path: Path,
                                                                      adapter: list[str]) -> None:
    provider = ProviderSettings(type="claude", transport="acp", acp_command=adapter, binary="claude-not-here-acp")
    runner = ProviderRunner(home, {"agent": provider}, {}, events=events, sessions=file_sessions(home))
    try:
        for _ in range(2):  # the one-shot preset runs (and says its own CLI is missing)
            with pytest.raises(ProviderRefused, match="`claude-not-here-acp` was not found"):
                await runner.run("agent", TurnRequest("hi", tmp_path / "ws", conversation=CONV))
    finally:
        await runner.close()
    fallbacks = [e for e in map(json.loads, home.events_file.read_text().splitlines())
                 if e["event"] == "provider.acp_fallback"]
    assert len(fallbacks) == 1 and fallbacks[0]["provider"] == "agent"  # once per provider
    assert runner.acp.fallen_back["agent"] == fallbacks[0]["reason"]


async def test_the_handlers_stop_leaves_no_agent_running(make_context: Callable[..., HandlerContext],
                                                         tmp_path: Path) -> None:
    orchestrator = orchestrator_for(make_context({"claude": fake_provider("claude"), "codex": fake_provider("codex")}))
    runner: ProviderRunner = orchestrator._runner
    env: dict[str, Any] = {"FAKE_ACP_STATE": str(tmp_path / "agents")}
    try:
        for name in ("claude", "codex"):
            result = await runner.run(name, TurnRequest("hello", tmp_path / "ws", env=env, conversation=CONV))
            assert result.stdout == "answer to: hello (0 earlier)"
        pids = [int(p.name.removeprefix("pid-")) for p in (tmp_path / "agents").glob("pid-*")]
        assert len(any_alive(pids)) == 2
        await orchestrator.stop()
        assert any_alive(pids) == []
    finally:
        kill_left([int(p.name.removeprefix("pid-")) for p in (tmp_path / "agents").glob("pid-*")])
