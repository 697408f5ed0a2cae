"""The `schedules:` key of orchestrator.yaml: when each scheduled prompt fires, what it starts and where its
result goes (the times themselves are computed in orchestrator/schedtimes.py)."""

from __future__ import annotations

from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class ScheduleDeliver(BaseModel):
    """The conversation a schedule's prompt is posted in, and so the one its result is delivered to (like the
    heartbeat's `notify`)."""

    model_config = ConfigDict(extra="forbid")

    profile: str = Field(min_length=1)
    conversationId: str = Field(min_length=1, max_length=256)  # noqa: N815 - the payload's own field name


class ScheduleConfig(BaseModel):
    """One scheduled prompt: a cron expression or an interval, its time zone, the prompt or workflow it starts,
    where the result goes, and what happens after downtime (`catch_up`) or while its last run goes on
    (`overlap`)."""

    model_config = ConfigDict(extra="forbid")

    cron: str | None = None
    every_sec: float | None = Field(default=None, ge=1)
    timezone: str = "UTC"
    prompt: str = ""
    workflow: str | None = None
    deliver: ScheduleDeliver
    catch_up: Literal["skip", "last", "all"] = "last"
    overlap: Literal["skip", "queue"] = "skip"
    enabled: bool = True

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        if value is None:
            return None
        from croniter import croniter

        if not croniter.is_valid(value):
            raise ValueError(f"not a cron expression: {value!r} (five fields: minute hour day month weekday)")
        return value

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown time zone {value!r} (an IANA name such as Europe/Paris)") from exc
        return value

    @model_validator(mode="after")
    def _one_when_one_what(self) -> ScheduleConfig:
        if (self.cron is None) == (self.every_sec is None):
            raise ValueError("give exactly one of `cron` and `every_sec`")
        if not self.prompt.strip() and self.workflow is None:
            raise ValueError("give a `prompt`, a `workflow`, or both")
        return self
