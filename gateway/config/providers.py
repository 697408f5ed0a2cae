"""`providers:` in settings.yaml: each agent CLI the gateway may run, a preset (`type`) or a generic argv."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, model_validator

from gateway.config.fields import Argv
from gateway.config.strict import Strict

PRESET_TYPES = ("claude", "codex", "gemini", "ollama")
ENDPOINT_TYPES = ("claude", "codex", "gemini")  # presets that take `base_url` and `api_key_env`
ACP_TYPES = ("claude", "codex", "gemini")  # presets that can run as live sessions (`transport: acp`)


class ProviderSettings(Strict):
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
