"""The orchestrator a CLI helper acts on, and its orchestrator.yaml read as it is (provider names unchecked)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.home import Home
    from gateway.settings import Settings
    from orchestrator.config.loading import LoadedConfig


def load_for_tools(home: Home, settings: Settings, orchestrator_id: str | None) -> LoadedConfig:
    """An orchestrator's configuration for CLI helpers (provider names are not checked here)."""
    from pydantic import ValidationError

    from gateway.settings import SettingsError, parse_yaml_file, validation_problems
    from orchestrator.agents.builtin import builtin_providers
    from orchestrator.config.loading import LoadedConfig, default_orchestrator_config
    from orchestrator.config.models import CONFIG_FILE, OrchestratorConfig

    chosen = orchestrator_id or settings.default_orchestrator
    ref = settings.orchestrators.get(chosen)
    if ref is None:
        raise SettingsError(f"unknown orchestrator {chosen!r}; orchestrators: {', '.join(settings.orchestrators)}")
    workspace = home.resolve(ref.workspace)
    path = workspace / CONFIG_FILE
    if not path.exists():
        return LoadedConfig(chosen, workspace, default_orchestrator_config(set(builtin_providers())))
    try:
        config = OrchestratorConfig.model_validate(parse_yaml_file(path))
    except ValidationError as exc:
        raise SettingsError.of(str(path), validation_problems(exc, OrchestratorConfig)) from exc
    return LoadedConfig(chosen, workspace, config)
