"""The REAL ACP adapters (claude-agent-acp, codex-acp, `gemini --acp`) through the pool, with the presets'
`base_url`/`api_key_env`, against the scripted model on 127.0.0.1 (tests/fakes/acp/scripted_model.py): memory
across two turns, streamed chunks, one tool call approved from "the chat". Skipped with a reason where an
adapter is not installed (`.ci/run` installs them into /opt/acp and /opt/agent-clis, as FINDINGS.md pins)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from gateway.home import Home
from gateway.settings import ProviderSettings
from orchestrator.agent_cli import AgentCall
from orchestrator.live import ToolApproval
from orchestrator.providers import ProviderRunner
from tests.fakes.acp.scripted_model import ScriptedModel
from tests.orchestrator.acp.acp_helpers import CONV, any_alive

ACP_BIN = Path(os.environ.get("ACP_PREFIX", "/opt/acp")) / "node_modules" / ".bin"
CLIS_BIN = Path(os.environ.get("AGENT_CLIS_PREFIX", "/opt/agent-clis")) / "node_modules" / ".bin"
KEY_VARIABLE = "SWITCHYARD_REAL_ACP_TEST_KEY"
PREFIX = {"claude": "/anthropic", "codex": "/openai/v1", "gemini": "/google"}
ADAPTER = {"claude": ACP_BIN / "claude-agent-acp", "codex": ACP_BIN / "codex-acp", "gemini": CLIS_BIN / "gemini"}


def _provider(like: str, url: str) -> ProviderSettings:
    adapter = ADAPTER[like]
    if not (adapter.exists() and os.access(adapter, os.X_OK)):
        pytest.skip(f"the real {like} ACP adapter is not installed ({adapter})")
    if shutil.which("node") is None:
        pytest.skip("the real ACP adapters need node, which is not on PATH")
    settings: dict[str, object] = {"model": {"codex": "gpt-5.4", "gemini": "gemini-fake"}.get(like)}
    if like == "claude":  # the Claude Code the one-shot preset runs, not the adapter's bundled one
        settings["binary"] = str(CLIS_BIN / "claude") if (CLIS_BIN / "claude").exists() else None
    command = None if like == "gemini" else [str(adapter)]
    if like == "gemini":
        settings["binary"] = str(adapter)
    return ProviderSettings(type=like, transport="acp", acp_command=command, base_url=url + PREFIX[like],  # type: ignore[arg-type]
                            api_key_env=KEY_VARIABLE, timeout_sec=120, **settings)


@pytest.mark.parametrize("like", sorted(PREFIX))
async def test_a_real_adapter_remembers_streams_and_asks(home: Home, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch, like: str) -> None:
    user_home = tmp_path / "user-home"
    user_home.mkdir()
    monkeypatch.setenv("HOME", str(user_home))
    monkeypatch.setenv(KEY_VARIABLE, f"sk-real-acp-{like}")
    for variable in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "CODEX_HOME", "GEMINI_API_KEY",
                     "GOOGLE_GEMINI_BASE_URL", "GEMINI_CLI_HOME", "CLAUDE_CONFIG_DIR"):
        monkeypatch.delenv(variable, raising=False)
    async with ScriptedModel() as model:
        provider = _provider(like, model.url)
        runner = ProviderRunner(home, {"agent": provider}, {})
        seen: list[str] = []
        asked: list[ToolApproval] = []

        async def allow(approval: ToolApproval) -> str | None:
            asked.append(approval)
            return next(o.id for o in approval.options if o.kind == "allow_once")

        async def turn(prompt: str, **call: object) -> str:
            result = await runner.run("agent", prompt, request={}, request_file=None, cwd=tmp_path / "ws",
                                      call=AgentCall(conversation=CONV, **call))  # type: ignore[arg-type]
            return result.stdout

        try:
            await turn("remember the word zebra, then say ok")
            recalled = await turn("which word did I ask you to remember? [recall=zebra]")
            streamed = await turn("stream this answer [chunks=6]", on_text=seen.append)
            ran = await turn("run it [run=echo tool-ran-42 > proof.txt]", ask=allow)
            pids = [agent.pid for agent in runner.acp.pool.agents()] if runner.acp.pool else []
        finally:
            await runner.close()
    assert runner.acp.fallen_back == {}
    assert recalled.startswith("recall zebra: yes"), recalled
    assert len(seen) >= 6 and seen[-1] == streamed, seen
    assert len(asked) == 1 and "tool said" in ran, (asked, ran)
    assert (tmp_path / "ws" / "proof.txt").read_text().strip() == "tool-ran-42"
    assert {call.api for call in model.calls}  # every turn reached the fake model
    assert any_alive([pid for pid in pids if pid is not None]) == []
