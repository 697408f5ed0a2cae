"""What each turn cost, read from the CLI's own output (issue 23 §1): the fake CLIs (tests/fakes/clis, printing
usage as the real ones do: CLIS.md "Usage") through AgentCliRunner.run, the real claude, codex and gemini against
the fake model server, and a model API whose usage limit is reached (ProviderExhausted). A figure that is no
amount (NaN, infinite, negative) is not counted but kept with its raw value (issue 32 §3)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gateway.config.usage import UsageSettings
from gateway.home import Home
from gateway.settings import ProviderSettings
from gateway.telemetry.events import EventLog, read_events
from orchestrator.agents.clis import PRESETS
from orchestrator.agents.clis.runner import AgentCliRunner, ProviderExhausted, ProviderRefused
from orchestrator.agents.providers import ProviderRunner
from orchestrator.agents.request import ProviderCall, TurnRequest
from orchestrator.agents.spawn import ProviderFailed, ProviderResult
from orchestrator.usage.meter import LimitReached, UsageMeter
from orchestrator.usage.records import MemoryUsageRecords, Payer, Spent, TokenUsage
from tests.fakes.clis import FakeClis
from tests.fakes.model_server import ModelServer, Usage
from tests.fakes.orchestrator import isolate_real_cli
from tests.fakes.stores import file_sessions
from tests.integration.test_real_endpoints import KEY_VARIABLE, PREFIX, real_cli

FAKE_COST = 0.011624999999999998
FAKE_USAGE = {  # tests/fakes/clis/_common.py: 1200 fresh + 300 written to + 4000 read from the cache, 70 out
    "claude": TokenUsage(FAKE_COST, 1200 + 300 + 4000, 70),
    "codex": TokenUsage(None, 5200, 70),  # input_tokens holds the cached 4000, output_tokens the reasoning 20
    "gemini": TokenUsage(None, 2 * 5200, 2 * 70),  # the router's call and the answer's, thoughts included
    "ollama": TokenUsage(None, 1200, 70),
}


async def _run(home: Home, cli: str, tmp_path: Path, **settings: object) -> ProviderResult:
    provider = ProviderSettings.model_validate({"type": cli, "timeout_sec": 60, **settings})
    runner = AgentCliRunner(file_sessions(home), None)
    return await runner.run(ProviderCall.of(cli, provider, TurnRequest("say hi", tmp_path, env=dict(os.environ))))


@pytest.mark.parametrize("cli", sorted(FAKE_USAGE))
async def test_each_presets_result_carries_the_usage_its_cli_printed(
    fake_clis: FakeClis, home: Home, tmp_path: Path, cli: str
) -> None:
    result = await _run(home, cli, tmp_path)
    assert result.stdout == "echo: say hi"
    assert result.usage == FAKE_USAGE[cli]


async def test_gemini_with_a_model_named_counts_that_model_alone(
    fake_clis: FakeClis, home: Home, tmp_path: Path
) -> None:
    result = await _run(home, "gemini", tmp_path, model="gemini-3.8-flash")
    assert result.usage == TokenUsage(None, 5200, 70)


def test_codex_adds_up_every_completed_turn_and_a_cli_that_reports_nothing_has_no_usage() -> None:
    line = {"type": "turn.completed", "usage": {"input_tokens": 5200, "cached_input_tokens": 4000,
                                                "output_tokens": 70, "reasoning_output_tokens": 20}}
    two = "\n".join(json.dumps(x) for x in (line, {"type": "turn.started"}, line))
    assert PRESETS["codex"].read(two).usage == TokenUsage(None, 10400, 140)
    assert PRESETS["codex"].read('{"type":"thread.started","thread_id":"t"}').usage is None
    assert PRESETS["ollama"].read("hi\n", "").usage is None  # no --verbose summary


def test_gemini_json_output_lists_tokens_by_model_thoughts_included() -> None:
    tokens = {"input": 1200, "prompt": 5200, "candidates": 50, "total": 5270, "cached": 4000, "thoughts": 20,
              "tool": 0}
    stats = {"models": {"a": {"api": {}, "tokens": tokens}, "b": {"api": {}, "tokens": tokens}}, "tools": {}}
    reading = PRESETS["gemini"].read(json.dumps({"session_id": "s", "response": "hi", "stats": stats}, indent=2))
    assert (reading.answer, reading.usage) == ("hi", TokenUsage(None, 10400, 140))


@pytest.mark.parametrize(("cli", "usage"), [("claude", TokenUsage(0.0, 0, 0)), ("codex", None),
                                            ("gemini", TokenUsage(None, 0, 0))])
async def test_a_used_up_quota_is_exhausted_at_once_with_the_clis_words_and_its_usage(
    fake_clis: FakeClis, home: Home, tmp_path: Path, cli: str, usage: TokenUsage | None
) -> None:
    fake_clis.scenario(cli, "usage_limit")
    with pytest.raises(ProviderExhausted) as exhausted:
        await _run(home, cli, tmp_path)
    reply = exhausted.value.reply or ""
    assert "usage limit is reached" in reply and "runs it again once the limit resets" in reply
    assert "`fallback:`" in reply
    assert isinstance(exhausted.value, ProviderRefused) and exhausted.value.result is not None
    assert exhausted.value.result.usage == usage
    assert len(fake_clis.calls(cli)) == 1


@pytest.mark.parametrize(("cli", "scenario"), [("claude", "network"), ("codex", "bad_key"),
                                               ("gemini", "network"), ("ollama", "not_running")])
async def test_other_failures_are_not_exhausted(fake_clis: FakeClis, home: Home, tmp_path: Path, cli: str,
                                                scenario: str) -> None:
    fake_clis.scenario(cli, scenario)
    with pytest.raises((ProviderFailed, ProviderRefused)) as failed:
        await _run(home, cli, tmp_path)
    assert not isinstance(failed.value, ProviderExhausted)


def test_exhausted_reads_each_clis_own_words() -> None:
    said = {"claude": "API Error: Request rejected (429) · This request would exceed your organization's rate limit.",
            "codex": "You’ve hit your usage limit. Try again later.",
            "gemini": "[API Error: You have exhausted your daily quota on this model.]"}
    for cli, words in said.items():
        assert PRESETS[cli].exhausted(words), cli
        assert not PRESETS[cli].exhausted("API Error: 529 overloaded"), cli
    assert PRESETS["codex"].exhausted("Quota exceeded. Check your plan and billing details.")
    assert not PRESETS["ollama"].exhausted("Error: could not connect to ollama server")


REAL_USAGE = Usage(fresh_in=1111, cache_write=222, cached_in=3333, out=44, reasoning=9)
EXPECTED = {  # what each real CLI printed for REAL_USAGE, as the preset reads it (CLIS.md "Usage")
    "claude": (1111 + 222 + 3333, 44),
    "codex": (1111 + 3333, 44),
    "gemini": (2 * (1111 + 3333), 2 * 44),  # gemini-cli asks its router model first: two calls counted
}


async def _real(home: Home, cli: str, server: ModelServer, tmp_path: Path) -> ProviderResult:
    provider = ProviderSettings(type=cli, binary=real_cli(cli), base_url=server.url + PREFIX[cli],  # type: ignore[arg-type]
                                api_key_env=KEY_VARIABLE, timeout_sec=120, first_output_sec=90)
    env = dict(os.environ) | PRESETS[cli].endpoint_env(provider, os.environ[KEY_VARIABLE], tmp_path / "provider")
    runner = AgentCliRunner(file_sessions(home), None)
    return await runner.run(ProviderCall.of(cli, provider, TurnRequest("say hi", tmp_path, env=env)))


@pytest.mark.parametrize("cli", sorted(EXPECTED))
async def test_the_real_cli_reports_the_tokens_the_model_api_sent(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: str
) -> None:
    real_cli(cli)
    isolate_real_cli(tmp_path, monkeypatch, KEY_VARIABLE, f"sk-real-{cli}")
    async with ModelServer(reply="the fake model says hi", usage=REAL_USAGE) as server:
        result = await _real(home, cli, server, tmp_path)
    assert result.stdout == "the fake model says hi"
    assert result.usage is not None and (result.usage.tokens_in, result.usage.tokens_out) == EXPECTED[cli]
    if cli == "claude":  # priced by claude itself from the four counts
        assert result.usage.usd is not None and result.usage.usd > 0
    else:
        assert result.usage.usd is None


async def test_the_real_codex_is_exhausted_at_once_by_a_usage_limit(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """codex does not retry a 429 `usage_limit_reached` (claude retries a 429 ten times over ~3 min, gemini a
    quota without details ~2.5 min: CLIS.md "Usage limit"; not run here)."""
    real_cli("codex")
    isolate_real_cli(tmp_path, monkeypatch, KEY_VARIABLE, "sk-real-codex")
    async with ModelServer(limited=True) as server:
        with pytest.raises(ProviderExhausted) as exhausted:
            await _real(home, "codex", server, tmp_path)
    assert "hit your usage limit" in str(exhausted.value)
    assert len(server.model_calls) == 1


async def test_the_real_gemini_is_exhausted_at_once_by_a_daily_quota(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_cli("gemini")
    isolate_real_cli(tmp_path, monkeypatch, KEY_VARIABLE, "sk-real-gemini")
    async with ModelServer(limited=True) as server:
        with pytest.raises(ProviderExhausted) as exhausted:
            await _real(home, "gemini", server, tmp_path)
    assert "exhausted your daily quota" in str(exhausted.value)


async def test_the_real_claude_is_exhausted_by_a_429_once_its_retries_end(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CLAUDE_CODE_MAX_RETRIES=1 shortens its ten retries (~3 min by default) to one."""
    real_cli("claude")
    isolate_real_cli(tmp_path, monkeypatch, KEY_VARIABLE, "sk-real-claude")
    monkeypatch.setenv("CLAUDE_CODE_MAX_RETRIES", "1")
    async with ModelServer(limited=True) as server:
        with pytest.raises(ProviderExhausted) as exhausted:
            await _real(home, "claude", server, tmp_path)
    assert "Request rejected (429)" in str(exhausted.value)
    assert len(server.model_calls) == 2


NOT_AMOUNTS = ["NaN", "Infinity", "-Infinity", "-0.5", "1e+300", '"0.5"', "true"]  # as each raw value is named


def _printed(value: dict[str, object], raw: str) -> str:
    """A CLI's JSON line holding `raw` as printed, where `value` has RAW."""
    return json.dumps(value, separators=(",", ":")).replace('"RAW"', raw)


@pytest.mark.parametrize("raw", NOT_AMOUNTS)
def test_a_claude_cost_that_is_no_amount_is_not_counted_and_kept_with_its_raw_value(raw: str) -> None:
    line = _printed({"type": "result", "subtype": "success", "result": "hi", "total_cost_usd": "RAW",
                     "usage": {"input_tokens": 10, "output_tokens": 2}}, raw)
    reading = PRESETS["claude"].read(line)
    assert reading.answer == "hi"
    assert reading.usage == TokenUsage(None, 10, 2, (("total_cost_usd", raw),))
    assert reading.usage.spent(1.0) == Spent(0.0, 10, 2, 1, 1.0)


@pytest.mark.parametrize("raw", [*NOT_AMOUNTS, "12.5"])
def test_a_token_count_that_is_no_whole_amount_is_not_counted_by_any_preset(raw: str) -> None:
    claude = _printed({"type": "result", "subtype": "success", "result": "hi", "total_cost_usd": 0.5,
                       "usage": {"input_tokens": 10, "cache_read_input_tokens": "RAW", "output_tokens": 2}}, raw)
    assert PRESETS["claude"].read(claude).usage == TokenUsage(0.5, 10, 2, (("cache_read_input_tokens", raw),))
    codex = _printed({"type": "turn.completed", "usage": {"input_tokens": "RAW", "output_tokens": 7}}, raw)
    assert PRESETS["codex"].read(codex + "\n" + codex).usage == TokenUsage(
        None, None, 14, (("input_tokens", raw), ("input_tokens", raw)))
    gemini = _printed({"type": "result", "stats": {"input_tokens": 100, "total_tokens": "RAW", "output_tokens": 9}},
                      raw)
    assert PRESETS["gemini"].read(gemini).usage == TokenUsage(None, 100, 9, (("total_tokens", raw),))
    by_model = _printed({"stats": {"models": {"m": {"tokens": {"prompt": "RAW", "candidates": 4, "thoughts": 1}}}}},
                        raw)
    assert PRESETS["gemini"].read(by_model).usage == TokenUsage(None, 0, 5, (("models.m.tokens.prompt", raw),))


def test_a_gemini_total_below_its_input_and_an_ollama_count_too_big_are_not_counted() -> None:
    gemini = '{"type":"result","stats":{"input_tokens":100,"total_tokens":40}}'
    assert PRESETS["gemini"].read(gemini).usage == TokenUsage(None, 100, None, (("total_tokens - input_tokens",
                                                                                 "-60"),))
    huge = "9" * 20
    ollama = PRESETS["ollama"].read("hi\n", f"prompt eval count:    {huge} token(s)\neval count:    3 token(s)\n")
    assert ollama.usage == TokenUsage(None, None, 3, (("prompt eval count", huge),))


async def test_a_real_claude_reporting_a_negative_cost_does_not_lower_what_its_sender_spent(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model API reporting negative token counts makes the real claude print `"total_cost_usd": -25`: counted,
    the sender's total would drop by $25 and the limit would let every later turn run."""
    real_cli("claude")
    isolate_real_cli(tmp_path, monkeypatch, KEY_VARIABLE, "sk-real-claude")
    events = EventLog(home.events_file)
    records = MemoryUsageRecords()
    settings = UsageSettings.model_validate({"limits": [{"per": "sender", "day": {"usd": 1.0}}]})
    meter = UsageMeter(records, settings, events)
    payer = Payer("console/console/ada", "console/console/c1", "console")
    meter.record(payer, "claude", Spent(usd=0.9, turns=1))
    async with ModelServer(reply="hi", usage=Usage(fresh_in=-5_000_000, cache_write=0, cached_in=0, out=-1_000_000,
                                                   reasoning=0)) as server:
        provider = ProviderSettings(type="claude", binary=real_cli("claude"), base_url=server.url + PREFIX["claude"],
                                    api_key_env=KEY_VARIABLE, timeout_sec=120, first_output_sec=90)
        runner = ProviderRunner(home, {"claude": provider}, {}, sessions=file_sessions(home), meter=meter)
        result = await runner.run("claude", TurnRequest("say hi", tmp_path, payer=payer))
    assert result.stdout == "hi"
    today = meter.now().date()
    spent = records.totals("sender", payer.sender, today, today)
    assert spent.turns == 2 and spent.usd == pytest.approx(0.9)
    invalid = [(e["field"], e["raw"]) for e in read_events(home.events_file) if e["event"] == "usage.invalid"]
    assert ("total_cost_usd", "-25") in invalid
    meter.record(payer, "claude", Spent(usd=0.1, turns=1))
    with pytest.raises(LimitReached):
        meter.check(payer, "claude")
