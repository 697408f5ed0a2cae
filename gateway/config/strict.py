"""The base of every settings.yaml section: a key its model does not declare is an error, not ignored."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """A section of settings.yaml: unknown keys are refused (gateway/config/keyhints.py names the closest)."""

    model_config = ConfigDict(extra="forbid")
