"""settings.yaml: the model of the whole file, the embedded default, and loading with clear errors.

Each section's models live in gateway/config/ by concern; this module is the plugin contract's path to all of
them (`from gateway.settings import ChannelOptions, ...`), so it re-exports every one."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, model_validator

from gateway.config.alerts import ALERT_KINDS, AlertKind, AlertSettings, AlertTarget
from gateway.config.channels import DEFAULT_PAIRING_CODE_TTL_S, ChannelOptions, ChannelProfile
from gateway.config.chattools import ChatToolsSettings
from gateway.config.dashboard import DashboardSettings, is_loopback
from gateway.config.fields import Argv, IdText
from gateway.config.problems import SettingsError, UnknownBackend, validation_problems
from gateway.config.providers import ACP_TYPES, ENDPOINT_TYPES, PRESET_TYPES, ProviderSettings
from gateway.config.queue import FileSettings, QueueSettings
from gateway.config.roles import RoleSettings
from gateway.config.strict import Strict
from gateway.config.telemetry import TelemetrySettings
from gateway.config.transcribe import TranscribeSettings
from gateway.config.usage import UsageSettings
from gateway.config.yamlfile import error_text as yaml_error_text
from gateway.config.yamlfile import load_yaml

__all__ = [
    "ACP_TYPES", "ALERT_KINDS", "DEFAULT_PAIRING_CODE_TTL_S", "ENDPOINT_TYPES", "PRESET_TYPES", "AlertKind",
    "AlertSettings", "AlertTarget", "Argv", "ChannelOptions", "ChannelProfile", "ChatToolsSettings",
    "DashboardSettings", "FileSettings", "IdText", "OrchestratorRef", "ProviderSettings", "QueueSettings",
    "RoleSettings", "Settings", "SettingsError", "TelemetrySettings", "TranscribeSettings", "UnknownBackend",
    "UsageSettings", "default_settings", "is_loopback", "load_settings", "load_yaml", "parse_yaml_file",
    "secret_env_names", "validate_channel_options", "validation_problems", "yaml_error_text",
]


class OrchestratorRef(Strict):
    workspace: str


class Settings(Strict):
    queue: QueueSettings = Field(default_factory=QueueSettings)
    providers: dict[str, ProviderSettings] = Field(default_factory=dict)
    orchestrators: dict[str, OrchestratorRef] = Field(
        default_factory=lambda: {"main": OrchestratorRef(workspace="orchestrators/main")}
    )
    default_orchestrator: str = "main"
    channels: list[ChannelProfile] = Field(default_factory=list)
    files: FileSettings = Field(default_factory=FileSettings)
    dashboard: DashboardSettings = Field(default_factory=DashboardSettings)
    transcribe: TranscribeSettings | None = None  # voice notes and audio files to text (else refused, told)
    usage: UsageSettings = Field(default_factory=UsageSettings)  # the day's time zone and the spending limits
    alerts: AlertSettings | None = None  # the operators' conversation told of failures (off unless set)
    roles: dict[str, RoleSettings] = Field(default_factory=dict)  # the operator's roles (gateway/roles.py)
    telemetry: TelemetrySettings | None = None  # OpenTelemetry traces (off unless set)
    chat_tools: ChatToolsSettings = Field(default_factory=ChatToolsSettings)  # the agents' MCP chat tools
    plugins: list[str] = Field(default_factory=list)
    log_format: Literal["text", "json"] = "text"  # stderr: one line per record (SWITCHYARD_LOG_FORMAT wins)

    @model_validator(mode="before")
    @classmethod
    def _empty_sections(cls, data: Any) -> Any:
        """A section left with every example commented out (`providers:`) is empty, not an error."""
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if value is not None}
        return data

    @model_validator(mode="after")
    def _check_references(self) -> Settings:
        if self.default_orchestrator not in self.orchestrators:
            raise ValueError(
                f"default_orchestrator: {self.default_orchestrator!r} is not a key of orchestrators"
            )
        seen: set[str] = set()
        for index, profile in enumerate(self.channels):
            if profile.id in seen:
                raise ValueError(f"channels.{index}.id: duplicate channel profile id {profile.id!r}")
            seen.add(profile.id)
            if profile.orchestrator and profile.orchestrator not in self.orchestrators:
                raise ValueError(
                    f"channels.{index}.orchestrator: {profile.orchestrator!r} is not a key of orchestrators"
                )
        if self.alerts is not None and self.alerts.to.profile not in seen:
            raise ValueError(f"alerts.to.profile: {self.alerts.to.profile!r} is not a configured channel profile id")
        return self

    def orchestrator_for(self, profile_id: str | None) -> str:
        """Maps a channel profile to its orchestrator id (else `default_orchestrator`)."""
        for profile in self.channels:
            if profile.id == profile_id and profile.orchestrator:
                return profile.orchestrator
        return self.default_orchestrator

    def profile(self, profile_id: str) -> ChannelProfile | None:
        """The channel profile with this id, if configured."""
        return next((p for p in self.channels if p.id == profile_id), None)


def secret_env_names(settings: Settings) -> frozenset[str]:
    """Every environment variable a `*_env` key names, anywhere in the settings (channel tokens, app
    secrets, verify tokens, DSNs): what no provider may see."""
    names: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str) and key.endswith("_env") and isinstance(item, str) and item:
                    names.add(item)
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(settings.model_dump())
    return frozenset(names)


def parse_yaml_file(path: Path) -> dict[str, Any]:
    """Reads a YAML mapping, raising SettingsError with the file name on any problem."""
    try:
        data = load_yaml(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise SettingsError(f"{path}: file not found") from exc
    except yaml.MarkedYAMLError as exc:
        raise SettingsError(f"{path}: cannot read: {yaml_error_text(exc)}") from exc
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise SettingsError(f"{path}: cannot read: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"{path}: expected a mapping of keys at the top level")
    return data


def load_settings(path: Path | None, *, required: bool = False) -> Settings:
    """Loads settings.yaml; a missing file means the embedded default (console, web chat, built-in provider),
    unless the file is `required` (named on the command line)."""
    if path is None or (not required and not path.exists()):
        return default_settings()
    try:
        return Settings.model_validate(parse_yaml_file(path))
    except ValidationError as exc:
        raise SettingsError.of(str(path), validation_problems(exc, Settings)) from exc


def validate_channel_options(settings: Settings, models: Mapping[str, type[BaseModel]], known: Collection[str],
                             *, source: str) -> None:
    """Checks each profile's type-specific keys against its type's options model; raises SettingsError
    naming the profile and key, e.g. `channels.0 (beat): intervall_sec: extra inputs are not permitted`."""
    problems = []
    for index, profile in enumerate(settings.channels):
        where = f"channels.{index} ({profile.id})"
        if profile.type not in known:
            problems.append(f"{where}: type: no installed plugin provides channel type {profile.type!r} "
                            f"(available: {', '.join(sorted(known))})")
            continue
        model = models.get(profile.type)
        if model is None:
            continue  # a plugin that declares no options model keeps reading its keys unchecked
        try:
            model.model_validate(profile.model_extra or {})
        except ValidationError as exc:
            also = [key for key in ChannelProfile.model_fields if key not in model.model_fields]
            problems += [f"{where}: {problem}" for problem in validation_problems(exc, model, also)]
    if problems:
        raise SettingsError.of(source, problems)


def default_settings() -> Settings:
    """The embedded default: a console channel, the web chat on 127.0.0.1 (`run` prints its login link) and the
    built-in offline provider, no tokens."""
    return Settings(channels=[ChannelProfile(id="web", type="web"), ChannelProfile(id="console", type="console")])
