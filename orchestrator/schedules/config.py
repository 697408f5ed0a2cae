"""The `schedules:` key of orchestrator.yaml: when each scheduled prompt fires, what it starts and where its
result goes (the times themselves are computed in orchestrator/schedules/times.py)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gateway.config.fields import IdText
from gateway.config.timezones import TimeZoneName

if TYPE_CHECKING:
    from gateway.settings import Settings


class ScheduleDeliver(BaseModel):
    """The conversation a schedule's prompt is posted in, and so the one its result is delivered to (like the
    heartbeat's `notify`)."""

    model_config = ConfigDict(extra="forbid")

    profile: str = Field(min_length=1)
    conversationId: IdText = Field(min_length=1, max_length=256)  # noqa: N815 - the payload's own field name


class ScheduleConfig(BaseModel):
    """One scheduled prompt: a cron expression or an interval, its time zone, the prompt or workflow it starts,
    where the result goes, and what happens after downtime (`catch_up`) or while its last run goes on
    (`overlap`)."""

    model_config = ConfigDict(extra="forbid")

    cron: str | None = None
    every_sec: float | None = Field(default=None, ge=1)
    timezone: TimeZoneName = "UTC"
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

    @model_validator(mode="after")
    def _one_when_one_what(self) -> ScheduleConfig:
        if (self.cron is None) == (self.every_sec is None):
            raise ValueError("give exactly one of `cron` and `every_sec`")
        if not self.prompt.strip() and self.workflow is None:
            raise ValueError("give a `prompt`, a `workflow`, or both")
        return self


def workflow_problems(schedules: Mapping[str, ScheduleConfig], workflows: Iterable[str]) -> Iterator[str]:
    """A schedule's `workflow` that its orchestrator.yaml does not define, as `key: problem`."""
    known = sorted(workflows)
    for name, schedule in schedules.items():
        if schedule.workflow is not None and schedule.workflow not in known:
            yield (f"schedules.{name}.workflow: unknown workflow {schedule.workflow!r}; "
                   f"workflows: {', '.join(known) or '(none)'}")


def deliver_problems(settings: Settings, files: Iterable[tuple[Path, Mapping[str, ScheduleConfig]]]) -> Iterator[str]:
    """A schedule's `deliver.profile` that settings.yaml does not configure (its occurrences could not be
    posted), as `file: key: problem`."""
    profiles = ", ".join(sorted(p.id for p in settings.channels)) or "(none)"
    for path, schedules in files:
        for name, schedule in schedules.items():
            if settings.profile(schedule.deliver.profile) is None:
                yield (f"{path}: schedules.{name}.deliver.profile: no channel profile "
                       f"{schedule.deliver.profile!r} in settings.yaml; profiles: {profiles}")
