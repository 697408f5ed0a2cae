"""When a schedule's occurrences fall, and which of those due now fire after downtime (`catch_up`).

Occurrences are the same on every host: a cron expression is read in the schedule's time zone (croniter,
daylight saving included); an interval counts from the Unix epoch, so `every_sec: 3600` falls on the hour.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from orchestrator.schedules.config import ScheduleConfig
from orchestrator.schedules.reminders import ReminderSchedule

ON_TIME_S = 60.0
"""An occurrence fired within this long after its time is on time; later, it was missed (downtime) and
`catch_up` decides."""
NEVER = datetime.max.replace(tzinfo=UTC)
"""The next occurrence of a one-off reminder whose time has passed: none."""
MAX_DUE = 1000
"""At most this many past occurrences are looked at in one pass (`catch_up: all` after a long downtime
fires the newest MAX_DUE; the older ones are skipped)."""


def next_after(schedule: ScheduleConfig, after: datetime) -> datetime:
    """The schedule's first occurrence strictly after `after` (an aware time), in UTC (NEVER for a one-off
    reminder past its time)."""
    if isinstance(schedule, ReminderSchedule) and schedule.at is not None:
        return schedule.at if schedule.at > after else NEVER
    if schedule.every_sec is not None:
        step = schedule.every_sec
        count = math.floor(after.timestamp() / step) + 1
        return datetime.fromtimestamp(count * step, UTC)
    from croniter import croniter

    assert schedule.cron is not None
    start = after.astimezone(ZoneInfo(schedule.timezone))
    found: datetime = croniter(schedule.cron, start).get_next(datetime)
    return found.astimezone(UTC)


def occurrences(schedule: ScheduleConfig, after: datetime, until: datetime) -> list[datetime]:
    """The occurrences in (after, until], oldest first: at most the newest MAX_DUE."""
    found: list[datetime] = []
    moment = after
    while True:
        moment = next_after(schedule, moment)
        if moment > until:
            return found
        found.append(moment)
        if len(found) > MAX_DUE:
            del found[0]


@dataclass
class Plan:
    """What one pass does with the occurrences due: fire some, skip the others (with why)."""

    fire: list[datetime] = field(default_factory=list)
    skip: list[tuple[datetime, str]] = field(default_factory=list)


def plan(schedule: ScheduleConfig, due: list[datetime], now: datetime) -> Plan:
    """Applies `catch_up` to the occurrences due (oldest first): one due on time fires; missed ones follow the
    policy: `skip` fires none, `last` the newest, `all` every one."""
    if not due:
        return Plan()
    on_time = now - due[-1] <= timedelta(seconds=ON_TIME_S)
    if len(due) == 1 and on_time:
        return Plan(fire=list(due))
    policy = schedule.catch_up
    if policy == "all":
        return Plan(fire=list(due))
    missed = f"missed (catch_up: {policy})"
    if policy == "last":
        return Plan(fire=[due[-1]], skip=[(moment, missed) for moment in due[:-1]])
    if on_time:  # skip: the missed ones are skipped, one on time still fires
        return Plan(fire=[due[-1]], skip=[(moment, missed) for moment in due[:-1]])
    return Plan(skip=[(moment, missed) for moment in due])
