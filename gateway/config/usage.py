"""`usage:` in settings.yaml: the time zone days and months are counted in, and the spending limits checked before
an agent turn starts (orchestrator/usage/meter.py)."""

from __future__ import annotations

from typing import Literal
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.config.timezones import TimeZoneName

LIMIT_UNITS = ("usd", "tokens", "turns", "agent_sec")


class LimitAmounts(BaseModel):
    """The most one payer may spend in one window; an absent unit is not limited."""

    model_config = ConfigDict(extra="forbid")

    usd: float | None = Field(default=None, ge=0)
    tokens: int | None = Field(default=None, ge=0)
    turns: int | None = Field(default=None, ge=0)
    agent_sec: float | None = Field(default=None, ge=0)

    def units(self) -> list[tuple[str, float]]:
        """(unit, most allowed) of each unit this limits."""
        return [(unit, float(value)) for unit in LIMIT_UNITS if (value := getattr(self, unit)) is not None]


class LimitRule(BaseModel):
    """One limit: per sender, conversation, channel profile or provider, per day and/or per month.

    Without `match` it applies to every key of its kind; with `match` only to that key (a sender
    `telegram/tg/12345`, a conversation `telegram/tg/-100200`, a profile `tg`, a provider `claude`), and then it
    replaces a rule without `match` for the same kind, window and unit (so one sender can be given more, or
    less, than everyone). A `per: sender` rule with `role` applies to the senders holding that role
    (gateway/roles.py), replacing a rule without `match` or `role`; a `match` still wins over it."""

    model_config = ConfigDict(extra="forbid")

    per: Literal["sender", "conversation", "profile", "provider"]
    match: str | None = Field(default=None, min_length=1)
    role: str | None = Field(default=None, min_length=1)
    day: LimitAmounts | None = None
    month: LimitAmounts | None = None

    @model_validator(mode="after")
    def _limits_something(self) -> LimitRule:
        if not any(window is not None and window.units() for window in (self.day, self.month)):
            raise ValueError("a limit needs `day:` or `month:` with at least one of usd, tokens, turns, agent_sec")
        if self.role is not None and self.per != "sender":
            raise ValueError("role: a limit per role is one per sender of that role (`per: sender`)")
        return self


class UsageSettings(BaseModel):
    """`usage:`: when a day begins (`timezone`, an IANA name; UTC by default) and the `limits`."""

    model_config = ConfigDict(extra="forbid")

    timezone: TimeZoneName = "UTC"
    limits: list[LimitRule] = Field(default_factory=list)

    def zone(self) -> ZoneInfo:
        """The time zone days and months are counted in."""
        return ZoneInfo(self.timezone)
