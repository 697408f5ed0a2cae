"""The orchestrator as a built-in plugin: the handler, the built-in providers, init files, checks, status.

Its modules are imported inside the hooks, so building a plugin manager (as `switchyard status` does)
does not import the whole orchestrator. Its subcommands are declared in orchestrator/cli/.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway import hookimpl

if TYPE_CHECKING:
    from gateway.api import BuiltinProvider, HandlerContext, StatusCache
    from gateway.backends import Backend
    from gateway.home import Home
    from gateway.settings import Settings
    from gateway.stores import StoreFactory
    from orchestrator.chat.handler import Orchestrator


@hookimpl
def switchyard_handler(context: HandlerContext) -> Orchestrator:
    """Builds the Orchestrator for the gateway's worker, with the stores of the gateway's backend."""
    from orchestrator.chat.handler import Orchestrator
    from orchestrator.storage.stores import open_stores

    if context.backend is None:
        raise RuntimeError("the gateway gave the handler no backend to open its stores on")
    return Orchestrator(context, open_stores(context.backend))


@hookimpl
def switchyard_stores() -> dict[str, dict[str, StoreFactory]]:
    """Declares the orchestrator's runs, sessions and history on the file backend (orchestrator/storage/stores.py)."""
    from orchestrator.storage.stores import file_stores

    return file_stores()


@hookimpl
def switchyard_providers() -> dict[str, BuiltinProvider]:
    """Declares `echo` and `rules`, which run without any CLI installed."""
    from orchestrator.agents.builtin import builtin_providers

    return builtin_providers()


@hookimpl
def switchyard_init(home: Home, settings: Settings) -> list[str]:
    """Writes the default orchestrator.yaml into each orchestrator workspace that has none."""
    from orchestrator.config.default import write_default_orchestrator
    from orchestrator.config.models import CONFIG_FILE

    written = []
    for ref in settings.orchestrators.values():
        workspace = home.resolve(ref.workspace)
        if not (workspace / CONFIG_FILE).exists():
            written.append(str(write_default_orchestrator(workspace)))
    return written


@hookimpl
def switchyard_check(home: Home, settings: Settings, providers: list[str]) -> list[str]:
    """Validates every orchestrator's orchestrator.yaml (keys, agents, workflows, the providers it names) and
    that the key variable of each provider with `api_key_env` is set, and that the `transcribe:` command's
    program is on PATH."""
    from orchestrator.agents.builtin import builtin_providers
    from orchestrator.agents.doctor import unset_keys
    from orchestrator.agents.transcribe import transcribe_problems
    from orchestrator.config.check import allow_problems
    from orchestrator.config.loading import load_every_config
    from orchestrator.config.models import CONFIG_FILE

    known = set(settings.providers) | set(builtin_providers()) | set(providers)
    source = str(home.settings_file)
    loaded, problems = load_every_config(home, settings, known)
    roles = [f"{each.workspace / CONFIG_FILE}: {problem}" for each in loaded
             for problem in allow_problems(each.config, settings)]
    return unset_keys(settings, source) + transcribe_problems(settings, source) + problems + roles


@hookimpl
def switchyard_check_warnings(home: Home, settings: Settings, providers: list[str]) -> list[str]:
    """A workspace or orchestrator.yaml `run` would create (with the default answering), each template
    placeholder no value fills (it reaches the agent or command as written), and a workspace seed that is
    not there."""
    from orchestrator.agents.builtin import builtin_providers
    from orchestrator.config.check import file_warnings, template_warnings, workspace_warnings
    from orchestrator.config.loading import load_every_config
    from orchestrator.config.models import CONFIG_FILE

    loaded, _ = load_every_config(home, settings, set(settings.providers) | set(builtin_providers()) | set(providers))
    return list(file_warnings(home, settings)) + [
        f"{each.workspace / CONFIG_FILE}: {warning}" for each in loaded if (each.workspace / CONFIG_FILE).exists()
        for warning in [*template_warnings(each.config, each.workspace),
                        *workspace_warnings(each.config, each.workspace)]]


@hookimpl
def switchyard_status(home: Home, settings: Settings, cache: StatusCache) -> dict[str, Any]:
    """Lists the runs not yet finished, read from disk, providers whose CLI cannot be found, orchestrator
    files that do not validate (a running gateway keeps their last valid version), and the retention of
    every kind of kept file. What comes from the configuration is validated once per version of the files
    (the status cache); PATH is searched and the runs read every time."""
    from orchestrator.agents.pathcheck import not_found, provider_line

    config = cache.remember("orchestrator", lambda: _config_status(home, settings),
                            lambda: _config_files(home, settings))
    return {"runs": _unfinished_runs(home, settings, cache),
            "providers": [provider_line(name, not_found(binary), used_by)
                          for name, binary, used_by in config["binaries"] if shutil.which(binary) is None]
            + [provider_line(name, f"transport acp: the adapter `{adapter}` is not on PATH: messages run the one-shot "
                                   "preset instead (see `switchyard doctor`)", used_by)
               for name, adapter, used_by in config.get("adapters", []) if shutil.which(adapter) is None],
            "config": [f"{problem} (a running gateway keeps its last valid version)" for problem in config["problems"]],
            "retention": config["retention"]}


def _config_status(home: Home, settings: Settings) -> dict[str, Any]:
    """What status shows of the configuration: the problems of the orchestrator files, the program each used
    provider runs (name, binary, users) and the retention settings."""
    from orchestrator.agents.acp.specs import adapter_argv
    from orchestrator.agents.doctor import check_providers, provider_uses
    from orchestrator.runs.retention import retention_settings

    uses, problems = provider_uses(home, settings)
    checks = check_providers(home, settings, all_providers=False, uses=uses)
    adapters = [[name, adapter_argv(provider)[0], uses.get(name, [])] for name, provider in settings.providers.items()
                if provider.transport == "acp" and name in uses]
    return {"problems": problems, "binaries": [[c.name, c.binary, c.used_by] for c in checks if c.binary],
            "adapters": adapters,
            "retention": retention_settings(settings)}


def _config_files(home: Home, settings: Settings) -> list[Path]:
    """Every orchestrator.yaml (present or not) whose validation status reports."""
    from orchestrator.config.models import CONFIG_FILE

    return [home.resolve(ref.workspace) / CONFIG_FILE for ref in settings.orchestrators.values()]


def _unfinished_runs(home: Home, settings: Settings, cache: StatusCache) -> list[dict[str, Any]]:
    """The summaries of the runs not yet finished (every host's on postgres); a home whose runs all ended
    is told from their state.json as plain JSON, without loading the run models. The backend is opened
    from the names the status cache keeps, without loading the settings."""
    from gateway.composition import backend_name, open_backend

    backend = open_backend(home, settings, name=cache.remember("backend", lambda: backend_name(settings)),
                           plugins=cache.remember("plugins", lambda: list(settings.plugins)))
    if backend.in_home and not _may_have_unfinished_runs(home.runs):
        return []
    from orchestrator.storage.stores import open_run_store  # not before: a home whose runs all ended needs no models

    return [run.summary() for run in open_run_store(backend, fsync=False).unfinished()]


def _may_have_unfinished_runs(root: Path) -> bool:
    """False when every run folder's state.json is in a final state (or there is none)."""
    from orchestrator.runs.jobstates import FINISHED

    try:
        folders = list(os.scandir(root))
    except OSError:
        return False
    for folder in folders:
        try:
            state = json.loads((Path(folder.path) / "state.json").read_bytes())
        except FileNotFoundError:
            continue
        except (OSError, ValueError):
            return True  # let the run store read it (and log why it cannot)
        if not isinstance(state, dict) or state.get("state") not in FINISHED:
            return True
    return False


@hookimpl
def switchyard_recent_runs(limit: int, backend: Backend) -> list[dict[str, Any]]:
    """Lists the runs changed last, with their steps, for the dashboard (every host's on postgres), from
    the gateway's backend (its pool, not a new backend's per read).

    `backend` has no default: pluggy passes only the arguments an implementation names without one."""
    from orchestrator.storage.stores import open_run_store

    return [run.overview() for run in open_run_store(backend, fsync=False).recent(limit)]


@hookimpl
def switchyard_schedules(home: Home, settings: Settings, backend: Backend) -> list[dict[str, Any]]:
    """Every orchestrator's schedules with their next and last occurrence (orchestrator/schedules/listing.py)."""
    from orchestrator.schedules.listing import rows_for

    return rows_for(home, settings, backend)
