"""How each preset's ACP adapter is started: its argv, the environment it gets (built explicitly from what
the one-shot preset passes) and the quiet/offline switches of tests/fakes/acp/FINDINGS.md."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field

from gateway.runtime.orphans import TOKEN_VAR, new_token
from gateway.settings import ProviderSettings


@dataclass(frozen=True)
class AdapterSpec:
    """One preset's adapter: its default program, whether one process hosts many sessions, how it is
    installed, and the variables that keep it quiet and offline (no telemetry, update checks, reports)."""

    preset: str
    program: str
    shared: bool  # codex and gemini: one process for every session; claude: one process per session
    install: str
    quiet_env: Mapping[str, str] = field(default_factory=dict)
    quiet_args: tuple[str, ...] = ()
    replay_after_load: bool = False  # gemini: `session/load`'s history replay comes after its response
    empty_after_cancel: bool = False  # claude: the prompt after a cancel ends empty (reload the session)
    drop_env: tuple[str, ...] = ()  # variables the adapter must not get
    settle_sec: float = 0.0  # claude: a process stopped sooner than this after a turn may lose the session


SPECS = {
    "claude": AdapterSpec(
        "claude", "claude-agent-acp", shared=False,
        install="npm install -g @zed-industries/claude-agent-acp@0.23.1",
        quiet_env={"DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1",
                   "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"},
        empty_after_cancel=True, settle_sec=1.0,
        # as root, IS_SANDBOX makes claude-agent-acp 0.23.1 offer bypassPermissions, and every session/new then
        # fails ("Query closed before response received"); switchyard never uses that mode
        drop_env=("IS_SANDBOX",)),
    "codex": AdapterSpec(
        "codex", "codex-acp", shared=True,
        install="npm install -g @zed-industries/codex-acp@0.16.0 (and bubblewrap: apt-get install bubblewrap)",
        quiet_args=("-c", "check_for_update_on_startup=false", "-c", "analytics.enabled=false",
                    "-c", "feedback.enabled=false")),
    "gemini": AdapterSpec(
        "gemini", "gemini", shared=True, install="npm install -g @google/gemini-cli@0.61.0",
        quiet_env={"GEMINI_CLI_TRUST_WORKSPACE": "true", "GEMINI_CLI_NO_RELAUNCH": "true",
                   "GEMINI_TELEMETRY_ENABLED": "false"},
        replay_after_load=True),
}


def spec_of(provider: ProviderSettings) -> AdapterSpec:
    """The adapter spec of an acp provider's preset."""
    assert provider.type in SPECS, provider.type
    return SPECS[provider.type]


def adapter_argv(provider: ProviderSettings) -> list[str]:
    """The adapter's argv: `acp_command` when set, else the preset's adapter with its model and quiet flags."""
    if provider.acp_command:
        return list(provider.acp_command)
    spec = spec_of(provider)
    if spec.preset == "gemini":
        model = ["--model", provider.model] if provider.model else []
        return [provider.binary or spec.program, "--acp", *model]
    model = ["-c", f"model={provider.model}"] if provider.model and spec.preset == "codex" else []
    return [spec.program, *spec.quiet_args, *model]


def adapter_env(provider: ProviderSettings, env: Mapping[str, str]) -> dict[str, str]:
    """The whole environment of the adapter: what the one-shot preset gets (`env`: the gateway's environment
    without any `*_env` secret, the provider's `env` and its endpoint variables), the quiet switches, and
    for claude the model and the Claude Code the one-shot preset runs; and a token of the adapter's own
    (gateway/runtime/orphans.py): it names this gateway process, so a next one ends the adapter if this one is
    killed, and it is no run's, so no run's end (containment.end_run) stops the adapter, which outlives its turns."""
    spec = spec_of(provider)
    extra: dict[str, str] = {}
    if spec.preset == "claude":
        if provider.model:
            extra["ANTHROPIC_MODEL"] = provider.model
        claude = shutil.which(provider.binary or "claude", path=env.get("PATH", os.defpath))
        if claude is not None and "CLAUDE_CODE_EXECUTABLE" not in env:
            extra["CLAUDE_CODE_EXECUTABLE"] = claude
    extra[TOKEN_VAR] = new_token()  # replaces any inherited one
    merged = {**spec.quiet_env, **env, **extra}
    for name in spec.drop_env:
        merged.pop(name, None)
    return merged


def adapter_path(provider: ProviderSettings, env: Mapping[str, str]) -> str | None:
    """Where the adapter's program is (None when it is not installed for this environment's PATH)."""
    return shutil.which(adapter_argv(provider)[0], path=env.get("PATH", os.defpath))


def temp_home_problem(env: Mapping[str, str]) -> str:
    """codex refuses to link its sandbox helper under /tmp: a CODEX_HOME there breaks sandboxed commands."""
    home = env.get("CODEX_HOME", "")
    if home and os.path.realpath(home).startswith("/tmp/"):
        return f"CODEX_HOME {home} is under /tmp: codex's sandboxed commands will fail there"
    return ""
