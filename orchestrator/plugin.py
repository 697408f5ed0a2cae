"""The orchestrator as a built-in plugin: the handler, the built-in providers, init files, checks, status."""

from __future__ import annotations

import argparse
from typing import Any

from gateway import hookimpl
from gateway.api import BuiltinProvider, HandlerContext
from gateway.home import Home
from gateway.settings import Settings
from orchestrator.cli import add_commands
from orchestrator.config import CONFIG_FILE, load_every_config, write_default_orchestrator
from orchestrator.doctor import missing_providers, provider_uses
from orchestrator.handler import Orchestrator
from orchestrator.rules import builtin_providers
from orchestrator.runs import RunStore


@hookimpl
def switchyard_handler(context: HandlerContext) -> Orchestrator:
    """Builds the Orchestrator for the gateway's worker."""
    return Orchestrator(context)


@hookimpl
def switchyard_providers() -> dict[str, BuiltinProvider]:
    """Declares `echo` and `rules`, which run without any CLI installed."""
    return builtin_providers()


@hookimpl
def switchyard_init(home: Home, settings: Settings) -> list[str]:
    """Writes the default orchestrator.yaml into each orchestrator workspace that has none."""
    written = []
    for ref in settings.orchestrators.values():
        workspace = home.resolve(ref.workspace)
        if not (workspace / CONFIG_FILE).exists():
            written.append(str(write_default_orchestrator(workspace)))
    return written


@hookimpl
def switchyard_check(home: Home, settings: Settings, providers: list[str]) -> list[str]:
    """Validates every orchestrator's orchestrator.yaml: keys, agents, workflows, the providers it names."""
    return load_every_config(home, settings, set(settings.providers) | set(builtin_providers()) | set(providers))[1]


@hookimpl
def switchyard_status(home: Home, settings: Settings) -> dict[str, Any]:
    """Lists the runs not yet finished, read from disk, providers whose CLI cannot be found, and
    orchestrator files that do not validate (a running gateway keeps their last valid version)."""
    uses, problems = provider_uses(home, settings)
    return {"runs": [run.summary() for run in RunStore(home).unfinished()],
            "providers": missing_providers(home, settings, uses),
            "config": [f"{problem} (a running gateway keeps its last valid version)" for problem in problems]}


@hookimpl
def switchyard_cli(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Adds `switchyard runs`, `switchyard coordination clean` and `switchyard workspace …`."""
    add_commands(commands)
