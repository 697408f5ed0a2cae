"""The orchestrator as a built-in plugin: the handler, the built-in providers, init files, checks, status.

Its modules are imported inside the hooks, so building a plugin manager (as `switchyard status` does)
does not import the whole orchestrator. Its subcommands are declared in orchestrator/cli.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway import hookimpl

if TYPE_CHECKING:
    from gateway.api import BuiltinProvider, HandlerContext
    from gateway.home import Home
    from gateway.settings import Settings
    from orchestrator.handler import Orchestrator


@hookimpl
def switchyard_handler(context: HandlerContext) -> Orchestrator:
    """Builds the Orchestrator for the gateway's worker."""
    from orchestrator.handler import Orchestrator

    return Orchestrator(context)


@hookimpl
def switchyard_providers() -> dict[str, BuiltinProvider]:
    """Declares `echo` and `rules`, which run without any CLI installed."""
    from orchestrator.rules import builtin_providers

    return builtin_providers()


@hookimpl
def switchyard_init(home: Home, settings: Settings) -> list[str]:
    """Writes the default orchestrator.yaml into each orchestrator workspace that has none."""
    from orchestrator.config import CONFIG_FILE, write_default_orchestrator

    written = []
    for ref in settings.orchestrators.values():
        workspace = home.resolve(ref.workspace)
        if not (workspace / CONFIG_FILE).exists():
            written.append(str(write_default_orchestrator(workspace)))
    return written


@hookimpl
def switchyard_check(home: Home, settings: Settings, providers: list[str]) -> list[str]:
    """Validates every orchestrator's orchestrator.yaml: keys, agents, workflows, the providers it names."""
    from orchestrator.config import load_every_config
    from orchestrator.rules import builtin_providers

    return load_every_config(home, settings, set(settings.providers) | set(builtin_providers()) | set(providers))[1]


@hookimpl
def switchyard_status(home: Home, settings: Settings) -> dict[str, Any]:
    """Lists the runs not yet finished, read from disk, providers whose CLI cannot be found, orchestrator
    files that do not validate (a running gateway keeps their last valid version), and the retention of
    every kind of kept file."""
    from orchestrator.doctor import missing_providers, provider_uses
    from orchestrator.retention import retention_settings
    from orchestrator.runs import RunStore

    uses, problems = provider_uses(home, settings)
    return {"runs": [run.summary() for run in RunStore(home).unfinished()],
            "providers": missing_providers(home, settings, uses),
            "config": [f"{problem} (a running gateway keeps its last valid version)" for problem in problems],
            "retention": retention_settings(settings)}


@hookimpl
def switchyard_recent_runs(home: Home, limit: int) -> list[dict[str, Any]]:
    """Lists the runs changed last, with their steps, for the dashboard."""
    from orchestrator.runs import RunStore

    return [run.overview() for run in RunStore(home).recent(limit)]
