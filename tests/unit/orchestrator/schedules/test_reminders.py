"""When a reminder fires (orchestrator/schedules/reminders.py parse_when, times.next_after of a one-off)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.schedules.reminders import Reminder, parse_when
from orchestrator.schedules.times import NEVER, next_after

NOW = datetime(2026, 12, 2, 8, 0, tzinfo=UTC)


@pytest.mark.parametrize(("when", "expected"), [
    ("in 2s", (None, NOW + timedelta(seconds=2))), ("in 90 minutes", (None, NOW + timedelta(minutes=90))),
    ("In 2h", (None, NOW + timedelta(hours=2))), ("in 1.5d", (None, NOW + timedelta(hours=36))),
    ("2026-12-24T09:00:00+01:00", (None, datetime(2026, 12, 24, 8, 0, tzinfo=UTC))),
    ("2026-12-24T09:00", (None, datetime(2026, 12, 24, 9, 0, tzinfo=UTC))),  # no offset: UTC
    ("0 9 * * 1-5", ("0 9 * * 1-5", None)),
])
def test_when_is_read_as_a_delay_an_iso_time_or_cron(when: str, expected: tuple[object, object]) -> None:
    assert parse_when(when, NOW) == expected


@pytest.mark.parametrize(("when", "reason"), [("tomorrow", "not a time"), ("in 2 fortnights", "not a time"),
                                              ("2026-12-01T00:00:00Z", "in the past"), ("* * *", "not a time"),
                                              ("in 0s", "is now")])
def test_anything_else_is_refused_with_what_is_accepted(when: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_when(when, NOW)


def test_a_one_off_occurs_once_at_its_time() -> None:
    schedule = Reminder(id="a", conversation="conv:c/p/x", profile="p", conversationId="x", at=NOW,
                        text="t").schedule()
    assert next_after(schedule, NOW - timedelta(hours=1)) == NOW
    assert next_after(schedule, NOW) == NEVER
