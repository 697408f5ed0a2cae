"""Reading orchestrator.yaml: validated with every problem named, the embedded default when there is none, every
orchestrator's at once with the problems across files, and the prompt templates it names."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gateway.config.yamlfile import load_yaml
from gateway.home import Home
from gateway.settings import Settings, SettingsError, parse_yaml_file, validation_problems
from orchestrator.config.default import DEFAULT_ORCHESTRATOR_YAML
from orchestrator.config.models import CONFIG_FILE, OrchestratorConfig, known_names
from orchestrator.config.parts import salvage
from orchestrator.schedules.config import deliver_problems


@dataclass(frozen=True)
class LoadedConfig:
    """An orchestrator's id, private workspace and parsed orchestrator.yaml."""

    orchestrator_id: str
    workspace: Path
    config: OrchestratorConfig



def parse_orchestrator_config(
    data: dict[str, Any], source: str, known_providers: set[str]
) -> OrchestratorConfig:
    """Validates an orchestrator.yaml mapping, raising SettingsError that names every failing key."""
    config, problems = checked_config(data, known_providers)
    if problems:
        raise SettingsError.of(source, problems)
    return config


def checked_config(data: dict[str, Any], known_providers: set[str]) -> tuple[OrchestratorConfig, list[str]]:
    """An orchestrator.yaml mapping validated, and its problems as `key: reason`: all in one pass, those of the
    references in the parts that are valid too (then the config holds only those parts)."""
    try:
        config, written, problems = OrchestratorConfig.model_validate(data), None, []
    except ValidationError as exc:
        problems = validation_problems(exc, OrchestratorConfig)
        config, written = salvage(OrchestratorConfig, data)
    return config, problems + [problem for problem in config.reference_problems(known_providers, written)
                               if problem not in problems]


def default_orchestrator_config(known_providers: set[str]) -> OrchestratorConfig:
    """The embedded default configuration (built-in providers only)."""
    data = load_yaml(DEFAULT_ORCHESTRATOR_YAML)
    return parse_orchestrator_config(data, "(embedded default orchestrator.yaml)", known_providers)


def load_orchestrator_config(workspace: Path, known_providers: set[str]) -> OrchestratorConfig:
    """Loads `<workspace>/orchestrator.yaml`; a missing file means the embedded default."""
    path = workspace / CONFIG_FILE
    if not path.exists():
        return default_orchestrator_config(known_providers)
    return parse_orchestrator_config(parse_yaml_file(path), str(path), known_providers)


def load_every_config(
    home: Home, settings: Settings, known_providers: set[str]
) -> tuple[list[LoadedConfig], list[str]]:
    """Every orchestrator's configuration that validates, and one `file: key: reason` line per
    problem of those that do not (the check at start, `switchyard check`, `doctor` and `status`); the
    schedules of a file with problems are checked too, so that every schedule's problem is named."""
    loaded, problems, schedules = [], [], []
    for orchestrator_id, ref in settings.orchestrators.items():
        workspace = home.resolve(ref.workspace)
        path = workspace / CONFIG_FILE
        try:
            config, found = (checked_config(parse_yaml_file(path), known_providers) if path.exists()
                             else (default_orchestrator_config(known_providers), []))
        except SettingsError as exc:
            problems += exc.problems
            continue
        problems += [f"{path}: {problem}" for problem in found]
        schedules.append((path, config.schedules))
        if not found:
            loaded.append(LoadedConfig(orchestrator_id, workspace, config))
    return loaded, problems + list(_profile_workflow_problems(settings, loaded)) + list(
        deliver_problems(settings, schedules)) + list(sandbox_problems(settings, loaded))


def sandbox_problems(settings: Settings, loaded: list[LoadedConfig]) -> Iterator[str]:
    """`sandbox: bwrap` where bubblewrap is not on PATH: an error at start, never a run without it."""
    if shutil.which("bwrap") is not None:
        return
    for config in loaded:
        if config.config.sandbox == "bwrap":
            yield (f"{config.workspace / CONFIG_FILE}: sandbox: bwrap, but `bwrap` is not on PATH "
                   "(apt-get install bubblewrap)")
    for name, provider in settings.providers.items():
        if provider.sandbox == "bwrap":
            yield f"providers.{name}.sandbox: bwrap, but `bwrap` is not on PATH (apt-get install bubblewrap)"


def _profile_workflow_problems(settings: Settings, loaded: list[LoadedConfig]) -> Iterator[str]:
    """A channel profile's `workflow:` (e.g. an inbox's) that its orchestrator.yaml does not define."""
    configs = {config.orchestrator_id: config for config in loaded}
    for index, profile in enumerate(settings.channels):
        workflow = profile.option("workflow")
        config = configs.get(settings.orchestrator_for(profile.id))
        if workflow and config is not None and workflow not in config.config.workflows:
            yield (f"{config.workspace / CONFIG_FILE}: workflows: no workflow {workflow!r}, which settings.yaml "
                   f"channels.{index} ({profile.id}).workflow names; workflows: {known_names(config.config.workflows)}")



def read_template(value: str, workspace: Path) -> str:
    """A prompt given inline, or read from a file when the value names one inside the workspace."""
    if "\n" in value or "{{" in value or len(value) > 1024:
        return value
    candidate = workspace / value
    return candidate.read_text(encoding="utf-8") if candidate.is_file() else value
