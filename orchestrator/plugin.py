"""The orchestrator as a built-in plugin: the handler, the built-in providers, init files, status."""

from __future__ import annotations

import argparse
from typing import Any

from gateway import hookimpl
from gateway.api import BuiltinProvider, HandlerContext
from gateway.home import Home
from gateway.settings import Settings
from orchestrator.cli import add_commands
from orchestrator.config import CONFIG_FILE, write_default_orchestrator
from orchestrator.doctor import missing_providers
from orchestrator.handler import Orchestrator
from orchestrator.retention import retention_settings
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
def switchyard_status(home: Home, settings: Settings) -> dict[str, Any]:
    """Lists the runs not yet finished, read from disk, providers whose CLI cannot be found, and the
    retention of every kind of kept file."""
    return {"runs": [run.summary() for run in RunStore(home).unfinished()],
            "providers": missing_providers(home, settings), "retention": retention_settings(settings)}


@hookimpl
def switchyard_cli(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Adds `switchyard runs`, `switchyard coordination clean` and `switchyard workspace …`."""
    add_commands(commands)


@hookimpl
def switchyard_recent_runs(home: Home, limit: int) -> list[dict[str, Any]]:
    """Lists the runs changed last, with their steps, for the dashboard."""
    return [run.overview() for run in RunStore(home).recent(limit)]
