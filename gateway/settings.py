"""settings.yaml: the models of every key, the embedded default, and loading with clear errors."""

from __future__ import annotations

import ipaddress
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gateway.config.fields import Argv, IdText
from gateway.config.roles import RoleSettings
from gateway.config.usage import UsageSettings
from gateway.config.yamlfile import error_text as yaml_error_text
from gateway.config.yamlfile import load_yaml


class SettingsError(Exception):
    """settings.yaml (or orchestrator.yaml) is missing, unreadable or invalid; the message names the key.

    `problems` holds one `file: key: reason` line per problem (the message joins them)."""

    def __init__(self, message: str, problems: list[str] | None = None):
        super().__init__(message)
        self.problems = problems or [message]

    @classmethod
    def of(cls, source: str, problems: list[str]) -> SettingsError:
        """One error for the problems of one file, each given as `key: reason` (one line each)."""
        return cls.listing([f"{source}: {problem}" for problem in problems])

    @classmethod
    def listing(cls, problems: list[str]) -> SettingsError:
        """One error for several `file: key: reason` lines: the message gives each on its own line."""
        if len(problems) == 1:
            return cls(problems[0], problems)
        return cls(f"{len(problems)} problems:\n  " + "\n  ".join(problems), problems)


class UnknownBackend(SettingsError):
    """`queue.backend` names a backend no installed plugin declares (gateway/composition.py)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class QueueSettings(_Strict):
    max_concurrency: int = Field(default=8, ge=1, le=1024)
    max_attempts: int = Field(default=5, ge=1)
    backoff_initial_ms: int = Field(default=500, ge=0)
    backoff_max_ms: int = Field(default=60000, ge=0)
    poll_ms: int = Field(default=500, ge=10)
    max_payload_bytes: int = Field(default=1_048_576, ge=256)
    fsync: bool = True
    duplicate_window_sec: int = Field(default=86400, ge=0)
    sent_retention_days: float = Field(default=7, ge=0)
    runs_retention_days: float = Field(default=30, ge=0)  # finished workflow runs (0: kept forever)
    lock_ttl_sec: float = Field(default=60, gt=0)
    receipt_after_sec: float = Field(default=5, ge=0)  # a message waiting this long behind its conversation
                                                       # is told so (0: never)
    backend: str = Field(default="files", pattern=r"^[a-z][a-z0-9_-]{0,31}$")  # a backend a plugin declares
    # (switchyard_backends): files (built in), postgres (shared state, more than one host), or a plugin's own
    dsn_env: str = Field(default="SWITCHYARD_DSN", min_length=1)  # the variable holding the PostgreSQL DSN
    lease_sec: float = Field(default=15, gt=0)  # postgres: a dead channel owner's profile is taken over after
                                                # this, and a silent worker's messages are retried by another
    events_retention_days: float = Field(default=30, ge=0)  # postgres: switchyard_events rows kept (0: forever)
    db_files_max_bytes: int = Field(default=20 * 1024 * 1024, ge=0)  # postgres: larger attachments need
                                                                     # files.shared_dir


PRESET_TYPES = ("claude", "codex", "gemini", "ollama")
DEFAULT_PAIRING_CODE_TTL_S = 3600.0  # a pending pairing code's life (OpenClaw's codes also expire after 1 hour)
ENDPOINT_TYPES = ("claude", "codex", "gemini")  # presets that take `base_url` and `api_key_env`
ACP_TYPES = ("claude", "codex", "gemini")  # presets that can run as live sessions (`transport: acp`)


class ProviderSettings(_Strict):
    """One provider: a preset for a known agent CLI (`type`), or a generic argv (`command`)."""

    type: Literal["claude", "codex", "gemini", "ollama"] | None = None
    command: Argv | None = Field(default=None, min_length=1)
    input: Literal["stdin", "arg"] = "stdin"
    timeout_sec: float = Field(default=300, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    max_output_bytes: int = Field(default=1_048_576, ge=1024)
    binary: str | None = Field(default=None, min_length=1)
    model: str | None = Field(default=None, min_length=1)
    extra_args: list[str] = Field(default_factory=list)
    session: Literal["conversation", "run", "none"] = "conversation"
    mode: Literal["answer", "edit"] | None = None
    allowed_tools: list[str] | None = None
    first_output_sec: float | None = Field(default=None, gt=0)
    base_url: str | None = Field(default=None, min_length=1)  # the model API the CLI calls (proxy, gateway, …)
    api_key_env: str | None = Field(default=None, min_length=1)  # the variable holding the key for it
    request_file: bool = False  # a workflow step writes its request JSON for it ($SWITCHYARD_REQUEST)
    transport: Literal["oneshot", "acp"] = "oneshot"  # acp: a live agent session per conversation (ACP adapter)
    acp_command: Argv | None = Field(default=None, min_length=1)  # the adapter's argv (else the preset's)
    max_live: int = Field(default=8, ge=1, le=1024)  # acp: live sessions kept warm for this provider
    idle_sec: float = Field(default=600, gt=0)  # acp: a session unused this long is closed (reloaded when needed)
    permissions: Literal["ask", "allow", "deny"] = "ask"  # acp: a tool call asks the chat, or is allowed/denied
    sandbox: Literal["none", "bwrap"] | None = None  # bwrap: its processes run confined (docs/sandbox.md)
    network: Literal["model-only", "full", "none"] | None = None  # in the sandbox (default: the orchestrator's)
    sandbox_paths: list[str] = Field(default_factory=list)  # more folders its sandbox sees read-only

    @model_validator(mode="after")
    def _check_endpoint(self) -> ProviderSettings:
        given = [key for key in ("base_url", "api_key_env") if getattr(self, key) is not None]
        if given and self.type not in ENDPOINT_TYPES:
            raise ValueError(f"{', '.join(given)}: only for the {', '.join(ENDPOINT_TYPES)} presets "
                             "(a `command` entry sets its own `env`)")
        if self.base_url is not None:
            parts = urlsplit(self.base_url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"base_url: {self.base_url!r} is not an http:// or https:// URL")
        return self

    @model_validator(mode="after")
    def _check_transport(self) -> ProviderSettings:
        if self.transport == "acp" and self.type not in ACP_TYPES:
            raise ValueError(f"transport: acp is only for the {', '.join(ACP_TYPES)} presets")
        if self.acp_command is not None and self.transport != "acp":
            raise ValueError("acp_command: only with `transport: acp`")
        return self

    @model_validator(mode="after")
    def _check_kind(self) -> ProviderSettings:
        if self.type is None:
            if self.command is None:
                raise ValueError("needs `type` (claude, codex, gemini, ollama) or `command` (an argv list)")
            preset_only = [key for key in ("binary", "model", "mode", "allowed_tools")
                           if getattr(self, key) is not None] + (["extra_args"] if self.extra_args else [])
            if preset_only:
                raise ValueError(f"{', '.join(preset_only)}: only for a preset (set `type`)")
        elif self.command is not None:
            raise ValueError("`command` and `type` exclude each other: a preset builds its own argv "
                             "(use `binary` and `extra_args` to adjust it)")
        elif self.input == "arg":
            raise ValueError("input: a preset always sends the prompt on stdin")
        return self

    @property
    def argv(self) -> list[str]:
        """The generic entry's argv (empty for a preset)."""
        return list(self.command or [])


class TranscribeSettings(_Strict):
    """`transcribe:`: the command that turns a voice note or audio file into text (it prints the text).

    `{file}` in the argv is replaced by the audio file's path; without it the path goes last. A bare
    list is the command alone."""

    command: Argv = Field(min_length=1)
    timeout_sec: float = Field(default=120, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    max_output_bytes: int = Field(default=65536, ge=1024)

    @model_validator(mode="before")
    @classmethod
    def _bare_list(cls, data: Any) -> Any:
        return {"command": data} if isinstance(data, list | str) else data

    @field_validator("command")
    @classmethod
    def _words(cls, value: list[str]) -> list[str]:
        if not value[0].strip():
            raise ValueError("the program (first word) is empty")
        return value

    def argv(self, path: str) -> list[str]:
        """The command for one audio file."""
        if any("{file}" in word for word in self.command):
            return [word.replace("{file}", path) for word in self.command]
        return [*self.command, path]


class OrchestratorRef(_Strict):
    workspace: str


class ChannelProfile(BaseModel):
    """One configured channel; type-specific keys are kept as extras for the plugin to read."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(min_length=1, max_length=128)
    type: str = Field(min_length=1)
    orchestrator: str | None = None
    allow_from: list[IdText] | None = None  # absent: everyone; [] nobody; `allow_from:` left empty is an error

    @field_validator("allow_from", mode="before")
    @classmethod
    def _allow_from_given(cls, value: Any) -> Any:
        """`allow_from:` with every entry commented out must not quietly mean "everyone"."""
        if value is None:
            raise ValueError("empty (every entry commented out?): list the sender ids to admit, "
                             "`[]` to admit nobody, or remove the key to admit everyone")
        return value

    def option(self, key: str, default: Any = None) -> Any:
        """Reads a type-specific key (e.g. `interval_sec`), with a default."""
        return (self.model_extra or {}).get(key, default)


class ChannelOptions(_Strict):
    """The type-specific keys of a channel profile; each channel type's model extends it (the keys every
    profile may carry besides id, type, orchestrator and allow_from are declared here). Each model is
    built when it first validates (`defer_build`): loading the plugins, as `status` does, builds none."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    pairing: bool = False
    pairing_code_ttl_sec: float = Field(default=DEFAULT_PAIRING_CODE_TTL_S, gt=0)
    workflow: str | None = None
    approvers: list[IdText] | None = None  # deprecated (gateway/roles.py): only these answer tool approvals
    roles: dict[str, list[IdText]] | None = None  # role -> sender ids (or `group:<id>`) given it on this profile
    default_role: str | None = Field(default=None, min_length=1)  # everyone else admitted (else `member`)

    @classmethod
    def unavailable(cls) -> str | None:
        """Why no profile of this type can start on this installation (a library that is not installed:
        `run` disables the profile), else None; `switchyard check` names it. A channel whose library is
        optional overrides it, and its channel raises ConfigurationError with the same reason."""
        return None


class DashboardSettings(_Strict):
    """The web dashboard and `/metrics` served by `switchyard run` (off unless `port` is set)."""

    port: int | None = Field(default=None, ge=0, le=65535)  # 0: any free port (written to status)
    host: str = "127.0.0.1"
    token_env: str | None = Field(default=None, min_length=1)
    refresh_sec: float = Field(default=2, gt=0)

    @model_validator(mode="after")
    def _check_token(self) -> DashboardSettings:
        if self.port is not None and self.token_env is None and not is_loopback(self.host):
            raise ValueError(f"token_env: required when host is not a loopback address (host: {self.host!r}); "
                             "name an environment variable holding the dashboard token")
        return self


def is_loopback(host: str) -> bool:
    """Whether a host name or address only accepts connections from this machine."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


AlertKind = Literal["dead_letter", "channel", "provider_login", "usage_limit", "database", "run_failed"]
ALERT_KINDS: tuple[AlertKind, ...] = get_args(AlertKind)


class AlertTarget(_Strict):
    """The conversation alerts are sent to: a configured channel profile and a conversation of it."""

    profile: str
    conversationId: IdText | None = None  # noqa: N815 - the payload's own field name


class AlertSettings(_Strict):
    """`alerts:`: what the operators are told, where, and how often (gateway/telemetry/alerts.py)."""

    to: AlertTarget
    send: list[AlertKind] = Field(default_factory=lambda: list(ALERT_KINDS))
    group_wait_sec: float = Field(default=10, ge=0)  # after the first alert, wait this long for others to join it
    group_interval_sec: float = Field(default=60, ge=0)  # at most one alert message this often
    channel_retrying_min: float = Field(default=5, ge=0)  # a channel still retrying after this long is reported
    database_unreachable_sec: float = Field(default=30, ge=0)  # the database unreachable this long is reported


class TelemetrySettings(_Strict):
    """`telemetry:`: OpenTelemetry traces of each message's path (gateway/telemetry/tracing.py); off unless set.
    Needs the `otel` extra (`pip install -e '.[otel]' in the clone`)."""

    exporter: Literal["otlp", "console"] = "otlp"  # console: each span printed as JSON on stdout
    endpoint: str = "http://127.0.0.1:4318"  # an OTLP/HTTP collector; `/v1/traces` is appended
    service_name: str = Field(default="switchyard", min_length=1)
    content: bool = False  # true: prompts, answers and message text as span attributes (else never)
    sample_ratio: float = Field(default=1.0, ge=0, le=1)  # the share of new traces kept (a carried one follows)


class FileSettings(_Strict):
    extra_roots: list[str] = Field(default_factory=list)
    shared_dir: str | None = None  # postgres: a folder every host mounts, for attachments over
                                   # queue.db_files_max_bytes


class ChatToolsSettings(_Strict):
    """The chat tools an agent turn gets (docs/chat-tools.md): on or off, and what one turn may send."""

    enabled: bool = True
    max_messages: int = Field(default=20, ge=0)  # send_message + send_file calls per turn
    max_file_bytes: int = Field(default=52_428_800, ge=0)  # the bytes of files one turn may send (all together)
    ask_timeout_sec: float = Field(default=600, gt=0)  # `ask` returns "no answer" after this
    max_reminders: int = Field(default=20, ge=0)  # `remind`: how many reminders one conversation may hold


class Settings(_Strict):
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


def validation_problems(error: ValidationError, model: type[BaseModel] | None = None,
                        also: Collection[str] = ()) -> list[str]:
    """A pydantic error as one line per failing key, e.g. `queue.max_attempts: …`; an unknown key of
    `model` is named with the closest key declared there (`also`: more keys allowed at the top)."""
    from gateway.config.keyhints import home_of, keys_at, unknown_key

    lines = []
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden" and model is not None:
            where, name = item["loc"][:-1], str(item["loc"][-1])
            known = keys_at(model, where) + (list(also) if not where else [])
            message = unknown_key(name, known, belongs=home_of(model, where, name))
        lines.append(f"{key}: {message}" if key and not message.startswith(key) else message)
    return lines


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
