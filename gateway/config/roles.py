"""`roles:` in settings.yaml: the operator's roles and the permissions each grants (gateway/roles.py resolves who
holds them and lists the permissions)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class RoleSettings(BaseModel):
    """One role of settings.yaml `roles:`: the permissions it grants (docs/roles.md lists them)."""

    model_config = ConfigDict(extra="forbid")

    permissions: list[str] = Field(default_factory=list)
    description: str = ""
