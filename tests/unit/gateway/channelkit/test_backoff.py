"""The one backoff schedule: doubling from the initial delay, capped, optionally jittered within the cap."""

from __future__ import annotations

import pytest

from gateway.channelkit.backoff import delay


def test_the_schedule_doubles_from_attempt_one_up_to_the_cap_and_jitter_stays_in_its_bounds() -> None:
    assert [delay(n, 0.5, 3.0) for n in (0, 1, 2, 3, 4, 5, 10_000)] == [0.5, 0.5, 1.0, 2.0, 3.0, 3.0, 3.0]
    for attempt in range(1, 12):
        base = min(0.5 * 2 ** (attempt - 1), 3.0)
        jittered = [delay(attempt, 0.5, 3.0, jitter=(0.5, 1.0)) for _ in range(50)]
        assert all(base * 0.5 <= d <= base for d in jittered)
        widened = [delay(attempt, 0.5, 3.0, jitter=(0.8, 1.2)) for _ in range(50)]
        assert all(base * 0.8 <= d <= min(base * 1.2, 3.0) for d in widened)
    assert len({delay(3, 0.5, 3.0, jitter=(0.5, 1.0)) for _ in range(20)}) > 1
    assert delay(3, 1.0, float("inf")) == 4.0


def test_a_jitter_range_must_be_positive_and_ordered() -> None:
    with pytest.raises(ValueError):
        delay(1, 1.0, 2.0, jitter=(1.2, 0.8))
