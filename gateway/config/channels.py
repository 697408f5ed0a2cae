"""`channels:` in settings.yaml: one profile per configured channel, and the options model a channel type extends."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gateway.config.fields import IdText
from gateway.config.strict import Strict

DEFAULT_PAIRING_CODE_TTL_S = 3600.0  # a pending pairing code's life (OpenClaw's codes also expire after 1 hour)


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


class ChannelOptions(Strict):
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
