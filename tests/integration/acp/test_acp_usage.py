"""What a live ACP turn used, on the ProviderResult the ACP route returns (issue 23 §1): the fake adapters
(reporting usage as the real ones do: FINDINGS.md "Usage") and the real ones against the fake model server."""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

import pytest

from gateway.home import Home
from gateway.settings import ProviderSettings
from orchestrator.agents.acp.turn import Turn
from orchestrator.agents.providers import ProviderRunner
from orchestrator.agents.request import TurnRequest
from orchestrator.agents.spawn import ProviderResult
from orchestrator.usage.records import TokenUsage
from tests.fakes.acp.helpers import CONV, Harness, fake_provider
from tests.fakes.model_server import ModelServer, Usage
from tests.fakes.orchestrator import API_PREFIX, isolate_real_cli
from tests.fakes.stores import file_sessions

TURN_COST = 0.011624999999999998
FAKE = {
    "claude": TokenUsage(TURN_COST, 1200 + 4000 + 300, 70),  # the result's usage; this turn's part of the cost
    "codex": TokenUsage(None, 5200 + 70, 0),  # only usage_update.used: the context after the turn
    "gemini": TokenUsage(None, 5200, 50),  # _meta.quota: the answer's tokens without the thoughts
}


async def _turn(runner: ProviderRunner, cwd: Path, env: dict[str, str] | None = None) -> ProviderResult:
    return await runner.run("agent", TurnRequest("say hi", cwd, env=env or {}, conversation=CONV))


@pytest.mark.parametrize("like", sorted(FAKE))
async def test_each_live_turn_carries_what_its_adapter_reported(home: Home, tmp_path: Path, like: str) -> None:
    harness = Harness(home, tmp_path, {"agent": fake_provider(like)})
    try:
        first = await _turn(harness.runner, harness.cwd, harness.env)
        second = await _turn(harness.runner, harness.cwd, harness.env)  # claude's cost: the session's, growing
    finally:
        await harness.close()
    assert harness.runner.acp.fallen_back == {}
    assert first.usage == second.usage == FAKE[like]


ACP_BIN = Path(os.environ.get("ACP_PREFIX", "/opt/acp")) / "node_modules" / ".bin"
CLIS_BIN = Path(os.environ.get("AGENT_CLIS_PREFIX", "/opt/agent-clis")) / "node_modules" / ".bin"
ADAPTER = {"claude": ACP_BIN / "claude-agent-acp", "codex": ACP_BIN / "codex-acp", "gemini": CLIS_BIN / "gemini"}
PREFIX = API_PREFIX
KEY_VARIABLE = "SWITCHYARD_REAL_ACP_USAGE_KEY"
REAL_USAGE = Usage(fresh_in=1111, cache_write=222, cached_in=3333, out=44, reasoning=9)
REAL = {  # (tokens in, tokens out) each real adapter reported for REAL_USAGE
    "claude": (1111 + 222 + 3333, 44),
    "codex": (1111 + 3333 + 44, 0),
    "gemini": (1111 + 3333, 44 - 9),
}


def _real_provider(like: str, url: str) -> ProviderSettings:
    adapter = ADAPTER[like]
    if not (adapter.exists() and os.access(adapter, os.X_OK)) or shutil.which("node") is None:
        pytest.skip(f"the real {like} ACP adapter (or node) is not installed ({adapter})")
    binary = {"claude": str(CLIS_BIN / "claude"), "gemini": str(adapter)}.get(like)
    return ProviderSettings(type=like, transport="acp", acp_command=None if like == "gemini" else [str(adapter)],  # type: ignore[arg-type]
                            base_url=url + PREFIX[like], api_key_env=KEY_VARIABLE, timeout_sec=120, binary=binary,
                            model={"codex": "gpt-5.4", "gemini": "gemini-fake"}.get(like))


@pytest.mark.parametrize("like", sorted(REAL))
async def test_a_real_adapters_live_turn_reports_the_tokens_the_model_api_sent(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, like: str
) -> None:
    isolate_real_cli(tmp_path, monkeypatch, KEY_VARIABLE, f"sk-real-acp-{like}")
    async with ModelServer(reply="the fake model says hi", usage=REAL_USAGE) as server:
        runner = ProviderRunner(home, {"agent": _real_provider(like, server.url)}, {}, sessions=file_sessions(home))
        try:
            first = await _turn(runner, tmp_path / "ws")
            second = await _turn(runner, tmp_path / "ws")
        finally:
            await runner.close()
    assert runner.acp.fallen_back == {}
    for result in (first, second):
        assert result.stdout == "the fake model says hi"
        assert result.usage is not None and (result.usage.tokens_in, result.usage.tokens_out) == REAL[like]
    assert first.usage is not None and second.usage is not None
    if like == "claude":  # its usage_update's cost is the session's so far: each turn gets its own part
        assert first.usage.usd is not None and first.usage.usd > 0
        assert second.usage.usd == pytest.approx(first.usage.usd)
    else:
        assert first.usage.usd is None


@pytest.mark.parametrize(("amount", "raw"), [(math.inf, "Infinity"), (math.nan, "NaN"), ("0.5", '"0.5"')])
def test_a_live_sessions_cost_that_is_no_amount_is_not_counted_and_kept_with_its_raw_value(
        amount: object, raw: str) -> None:
    turn = Turn(on_text=None, ask=None, permissions="allow")
    turn.update({"sessionUpdate": "usage_update", "used": 5270, "size": 200000,
                 "cost": {"amount": amount, "currency": "USD"}})
    assert turn.spent(None, None, 0.5) == TokenUsage(None, 5270, 0, (("cost.amount", raw),))
    assert turn.cost is None  # nor is it kept as the session's cost so far, which the next turn starts from
