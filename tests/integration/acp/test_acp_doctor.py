"""What `status` and `doctor` say of `transport: acp` providers: a missing adapter (the provider runs one-shot),
and whether a found adapter initializes."""

from __future__ import annotations

import sys

import pluggy

import orchestrator.plugin
from gateway import hookspecs
from gateway.cli.statuscache import StatusFileCache
from gateway.home import Home
from gateway.settings import ProviderSettings, Settings
from orchestrator.agents.doctor import check_adapters, check_providers
from tests.fakes.acp.helpers import fake_provider


def _settings(home: Home, provider: ProviderSettings) -> Settings:
    workspace = home.root / "orchestrators" / "main"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "orchestrator.yaml").write_text("selector: {provider: agent}\n")
    return Settings(providers={"agent": provider})


def test_status_says_a_missing_adapter_means_one_shot(home: Home) -> None:
    manager = pluggy.PluginManager("switchyard")
    manager.add_hookspecs(hookspecs)
    manager.register(orchestrator.plugin)
    provider = ProviderSettings(type="claude", transport="acp", binary=sys.executable,
                                acp_command=["/nowhere/claude-agent-acp"])
    settings = _settings(home, provider)
    [section] = manager.hook.switchyard_status(home=home, settings=settings,
                                               cache=StatusFileCache.empty(home.settings_file))
    [line] = section["providers"]
    assert line.startswith("provider agent: transport acp: the adapter `/nowhere/claude-agent-acp` is not on PATH: "
                           "messages run the one-shot preset instead")
    settings = _settings(home, fake_provider("claude", binary=sys.executable))
    [section] = manager.hook.switchyard_status(home=home, settings=settings,
                                               cache=StatusFileCache.empty(home.settings_file))
    assert section["providers"] == []


def test_a_live_provider_whose_cli_is_not_on_path_is_missing_only_where_it_runs_one_shot(home: Home) -> None:
    """A codex or gemini acp provider runs in its adapter, selector calls included: its CLI absent from PATH is
    no problem. claude's stateless calls (selector, diagnostics) run the one-shot CLI: absent, it is reported
    for them, not for an agent."""
    workspace = home.root / "orchestrators" / "main"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "orchestrator.yaml").write_text(
        "selector: {provider: codexlive}\ndiagnostics: {provider: claudeselect}\n"
        "agents: {writer: {provider: claudeagent}}\n"
        "workflows: {chat: {description: chat, steps: [{id: Reply, agent: writer}]}}\n")
    adapter = [sys.executable]  # found on PATH, as an installed adapter is
    settings = Settings(providers={
        name: ProviderSettings(type=kind, transport="acp", binary=f"/nowhere/{kind}", acp_command=adapter)
        for name, kind in (("codexlive", "codex"), ("claudeselect", "claude"), ("claudeagent", "claude"))})
    problems = {check.name: check.problem for check in check_providers(home, settings)}
    assert problems == {"codexlive": "", "claudeagent": "", "claudeselect": problems["claudeselect"]}
    assert "/nowhere/claude" in problems["claudeselect"]


async def test_doctor_shows_whether_each_adapter_initializes(home: Home) -> None:
    settings = Settings(providers={
        "good": fake_provider("codex"),
        "broken": ProviderSettings(type="gemini", transport="acp", acp_command=[sys.executable, "-c", "pass"]),
        "missing": ProviderSettings(type="claude", transport="acp", acp_command=["/nowhere/claude-agent-acp"]),
        "oneshot": ProviderSettings(type="codex"),
    })
    checks = {check.name: check for check in check_providers(home, settings)}
    await check_adapters(home, settings, list(checks.values()))
    assert checks["good"].adapter.startswith(f"{sys.executable}: initializes in ")
    assert checks["good"].adapter.endswith("(session/load supported)")
    assert "does not initialize" in checks["broken"].adapter
    assert checks["missing"].adapter.startswith("`/nowhere/claude-agent-acp` not found on PATH: runs the one-shot")
    assert checks["oneshot"].adapter == ""
