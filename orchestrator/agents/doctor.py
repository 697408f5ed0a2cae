"""Checks the providers a home uses: found on PATH, their version, and (with a probe) one tiny request."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.home import Home
from gateway.settings import ProviderSettings, Settings, secret_env_names
from orchestrator.agents.builtin import builtin_providers
from orchestrator.agents.clis import PRESETS
from orchestrator.agents.pathcheck import not_found, provider_line
from orchestrator.config.loading import load_every_config

if TYPE_CHECKING:
    from collections.abc import Iterator

    from orchestrator.agents.sessions import Change, Record, SessionStore

VERSION_TIMEOUT_SEC = 15.0
PROBE_PROMPT = "Reply with the single word OK and nothing else."
PROBE_FIRST_OUTPUT_SEC = 30.0
PROBE_TIMEOUT_SEC = 120.0


@dataclass
class ProviderCheck:
    """What doctor found out about one provider."""

    name: str
    kind: str  # claude | codex | gemini | ollama | command | built-in
    binary: str = ""
    path: str | None = None
    version: str = ""
    used_by: list[str] = field(default_factory=list)
    problem: str = ""
    probe: str = ""
    adapter: str = ""  # transport: acp: whether the adapter is installed and initializes

    @property
    def ok(self) -> bool:
        return not self.problem


def binary_of(provider: ProviderSettings) -> str:
    """The program a provider runs: the preset's CLI (or its `binary:`), else the argv's first word."""
    if provider.type is not None:
        return provider.binary or PRESETS[provider.type].binary
    return provider.argv[0]


def missing_key(provider: ProviderSettings) -> str:
    """Why a provider cannot run for want of the key its `api_key_env` names ("" when it has it)."""
    if provider.api_key_env is None or os.environ.get(provider.api_key_env, "").strip():
        return ""
    return f"api_key_env: the environment variable {provider.api_key_env} is not set (it holds the key for base_url)"


def unset_keys(settings: Settings, source: str) -> list[str]:
    """A `<source>: providers.<name>.api_key_env: …` line for each provider whose key variable is unset."""
    return [f"{source}: providers.{name}.{problem}" for name, provider in settings.providers.items()
            if (problem := missing_key(provider))]


def provider_uses(home: Home, settings: Settings) -> tuple[dict[str, list[str]], list[str]]:
    """Which orchestrator keys use each provider, and the problems of the orchestrator files that do not
    validate (`file: key: reason`)."""
    loaded, problems = load_every_config(home, settings, set(settings.providers) | set(builtin_providers()))
    uses: dict[str, list[str]] = {}
    for config in loaded:
        for key, provider in config.config.provider_references():
            uses.setdefault(provider, []).append(f"{config.orchestrator_id}:{key.split('.')[0]}")
    return {name: sorted(set(keys)) for name, keys in uses.items()}, problems


def check_providers(home: Home, settings: Settings, *, all_providers: bool = True,
                    uses: dict[str, list[str]] | None = None) -> list[ProviderCheck]:
    """One check per provider (those used by an orchestrator, plus all of settings.yaml when asked);
    `uses` is provider_uses' answer when the caller has it already."""
    if uses is None:
        uses, _ = provider_uses(home, settings)
    names = sorted(set(uses) | (set(settings.providers) if all_providers else set()))
    checks = []
    for name in names:
        provider = settings.providers.get(name)
        check = ProviderCheck(name, "built-in", used_by=uses.get(name, []))
        if provider is not None:
            check.kind = provider.type or "command"
            check.binary = binary_of(provider)
            check.path = shutil.which(check.binary)
            if check.path is None and not _live_without_cli(provider, check.used_by):
                check.problem = not_found(check.binary)
            check.problem = check.problem or missing_key(provider)
            if provider.transport == "acp":
                check.adapter = adapter_state(provider)
        checks.append(check)
    return checks


def _live_without_cli(provider: ProviderSettings, used_by: list[str]) -> bool:
    """Whether an acp provider whose CLI is not on PATH runs anyway: its adapter is found, and no call of it runs
    the one-shot preset (claude's stateless calls do: a selector's or diagnostics')."""
    if provider.transport != "acp":
        return False
    from orchestrator.agents.acp.specs import adapter_argv, spec_of

    if shutil.which(adapter_argv(provider)[0]) is None:
        return False
    stateless = any(use.endswith((":selector", ":diagnostics")) for use in used_by)
    return spec_of(provider).shared or not stateless


def adapter_state(provider: ProviderSettings) -> str:
    """Where an acp provider's adapter is, or that it is missing (the provider then runs one-shot)."""
    from orchestrator.agents.acp.specs import adapter_argv, spec_of

    program = adapter_argv(provider)[0]
    found = shutil.which(program)
    if found is None:
        return f"`{program}` not found on PATH: runs the one-shot preset (install: {spec_of(provider).install})"
    return found


def missing_providers(home: Home, settings: Settings, uses: dict[str, list[str]] | None = None) -> list[str]:
    """A line for each provider an orchestrator uses whose program is not on PATH."""
    return [provider_line(c.name, c.problem, c.used_by)
            for c in check_providers(home, settings, all_providers=False, uses=uses) if c.problem]


async def fill_versions(checks: list[ProviderCheck]) -> None:
    """Asks each found CLI for its version (`--version`)."""
    import asyncio  # imported here, as the runners are: `status` needs only the checks

    from orchestrator.agents.spawn import run_process

    async def version(check: ProviderCheck) -> None:
        if check.path is None or check.kind == "command":
            return
        flag = "--version" if check.kind != "ollama" else "-v"
        result = await run_process([check.path, flag], stdin=None, env=dict(os.environ), cwd=Path.cwd(),
                                   timeout_sec=VERSION_TIMEOUT_SEC, max_output=4096)
        text = (result.stdout or result.stderr_tail).strip().splitlines()
        check.version = text[-1][:60] if text and result.exit_code == 0 else f"(exit {result.exit_code})"

    await asyncio.gather(*(version(check) for check in checks))


async def probe(home: Home, settings: Settings, checks: list[ProviderCheck]) -> None:
    """Sends each found provider one tiny request and records the answer or the failure."""
    import asyncio

    from gateway.api import PermanentError
    from orchestrator.agents.clis.base import first_line
    from orchestrator.agents.providers import ProviderRunner
    from orchestrator.agents.request import TurnRequest
    from orchestrator.agents.spawn import ProviderFailed

    quick = {name: provider.model_copy(update={"first_output_sec": PROBE_FIRST_OUTPUT_SEC,
                                               "timeout_sec": min(provider.timeout_sec, PROBE_TIMEOUT_SEC)})
             for name, provider in settings.providers.items()}
    runner = ProviderRunner(home, quick, builtin_providers(), sessions=_no_sessions(),
                            hidden_env=secret_env_names(settings))
    cwd = home.root / "orchestrator" / "doctor"

    async def one(check: ProviderCheck) -> None:
        if check.problem:
            return
        try:
            probing = TurnRequest(PROBE_PROMPT, cwd, request={"probe": True}, mode="answer")
            result = await runner.run(check.name, probing)
        except (ProviderFailed, PermanentError) as exc:
            check.problem = str(exc).removeprefix(f"{check.name}: ")
        else:
            check.probe = first_line(result.stdout or "(empty answer)", 40)

    await asyncio.gather(*(one(check) for check in checks))


async def check_adapters(home: Home, settings: Settings, checks: list[ProviderCheck]) -> None:
    """Starts each found ACP adapter with the environment it would get and initializes it (then stops it)."""
    import asyncio

    from orchestrator.agents.acp.probe import initializes
    from orchestrator.agents.providers import ProviderRunner

    runner = ProviderRunner(home, settings.providers, {}, sessions=_no_sessions(),
                            hidden_env=secret_env_names(settings))
    cwd = home.root / "orchestrator" / "doctor"
    cwd.mkdir(parents=True, exist_ok=True)

    async def one(check: ProviderCheck) -> None:
        provider = settings.providers.get(check.name)
        if provider is None or provider.transport != "acp" or "not found" in check.adapter:
            return
        try:
            env = runner.provider_env(check.name, provider)
        except Exception as exc:  # the key api_key_env names is unset: reported as the problem already
            check.adapter += f": not started ({exc})"
            return
        check.adapter += f": {await initializes(provider, env, cwd)}"

    await asyncio.gather(*(one(check) for check in checks))


class _NoRecords:
    """Session records of calls that continue no session: none is read or kept (each probe is stateless:
    no conversation, no run)."""

    def read(self, key: tuple[str, ...]) -> Record:
        return {}

    def update(self, key: tuple[str, ...], change: Change, *, durable: bool = True) -> None:
        return None

    def every(self) -> Iterator[Record]:
        return iter(())


def _no_sessions() -> SessionStore:
    """The sessions of the doctor's probes, which keep none."""
    from orchestrator.agents.sessions import SessionStore

    return SessionStore(_NoRecords())


@dataclass(frozen=True)
class SandboxCheck:
    """Whether `sandbox: bwrap` can confine processes here, and who asks for it."""

    used_by: list[str]
    problem: str  # "" when bwrap works here

    def line(self) -> str:
        users = ", ".join(self.used_by) or "nobody (sandbox: none everywhere)"
        state = f"cannot run here: {self.problem}" if self.problem else "works here (pid, ipc, net, mount namespaces)"
        return f"sandbox bwrap {state}; used by {users}"


def check_sandbox(home: Home, settings: Settings) -> SandboxCheck:
    """Runs one tiny confined process (orchestrator/agents/sandbox.py `works`) and names who uses the sandbox."""
    from orchestrator.agents.sandbox import works

    loaded, _ = load_every_config(home, settings, set(settings.providers) | set(builtin_providers()))
    users = [f"orchestrator {each.orchestrator_id}" for each in loaded if each.config.sandbox == "bwrap"]
    users += [f"provider {name}" for name, provider in settings.providers.items() if provider.sandbox == "bwrap"]
    return SandboxCheck(users, works() or "")
