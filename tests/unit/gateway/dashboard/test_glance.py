"""gateway/dashboard/{series,plots,lines}.py: the per-minute figures of the last 24 hours, drawn escaped, and
events as words."""

from __future__ import annotations

import random
from datetime import UTC, datetime

from gateway.dashboard import page
from gateway.dashboard.lines import line
from gateway.dashboard.plots import glance
from gateway.dashboard.series import Minutes

NOW = datetime(2026, 12, 2, 12, 30, 30, tzinfo=UTC).timestamp()
HOSTILE = '<img src=x onerror="window.pwned=1">'


def ts(minutes_ago: float) -> str:
    return datetime.fromtimestamp(NOW - minutes_ago * 60, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def test_each_event_counts_in_the_minute_of_its_time_and_a_day_old_one_is_forgotten() -> None:
    minutes = Minutes(lambda: NOW)
    minutes.seed([{"ts": ts(3), "event": "message.claimed", "attempt": 1},
                  {"ts": ts(3), "event": "message.claimed", "attempt": 2},  # a retry is no new message
                  {"ts": ts(0), "event": "outgoing.sent"},
                  {"ts": ts(0), "event": "job.failed.final", "kind": "message"},
                  {"ts": ts(0), "event": "job.failed.final", "workflow": "build"},  # a run, not a dead letter
                  {"ts": ts(24 * 60 + 1), "event": "message.claimed", "attempt": 1}])
    rows = {row["minute"]: row for row in minutes.series()["minutes"]}
    now = int(NOW // 60)
    assert rows[now - 3]["in"] == 1 and rows[now]["out"] == 1 and rows[now]["dead"] == 1
    assert sorted(rows) == [now - 3, now]


def test_reply_latency_is_the_minutes_p50_and_p99_from_a_bounded_sample() -> None:
    minutes = Minutes(lambda: NOW, rng=random.Random(1))
    for took in range(1, 101):
        minutes.observe({"ts": ts(1), "event": "job.succeeded", "kind": "message", "duration_ms": took})
    for _ in range(10_000):
        minutes.observe({"ts": ts(0), "event": "job.succeeded", "kind": "message", "duration_ms": 5})
    older, newer = minutes.series()["minutes"]
    assert (older["p50_ms"], older["p99_ms"]) == (50, 99)
    assert (newer["p50_ms"], newer["p99_ms"]) == (5, 5)


def test_the_queue_sample_keeps_the_minutes_most_waiting_and_oldest() -> None:
    minutes = Minutes(lambda: NOW)
    minutes.sample_queue([{"folder": "incoming", "depth": 7, "oldest_age_s": 40.0}])
    minutes.sample_queue([{"folder": "incoming", "depth": 2, "oldest_age_s": None}])
    [row] = minutes.series()["minutes"]
    assert (row["waiting"], row["oldest_s"]) == (7, 40.0)


def test_plots_mark_each_minute_and_escape_what_a_provider_is_called() -> None:
    minutes = Minutes(lambda: NOW)
    for _ in range(3):
        minutes.observe({"ts": ts(2), "event": "message.claimed", "attempt": 1})
    spend = {"days": [{"day": "2026-12-02", "providers": {HOSTILE: {"usd": 1.5, "tokens": 1200}}}]}
    html = glance(minutes.series(), spend)
    assert 'data-minute="2026-12-02T12:28Z" data-value="3"' in html
    assert HOSTILE not in html and "&lt;img" in html and 'data-value="1.5"' in html


def test_an_event_is_words_with_its_json_only_inside_a_closed_details() -> None:
    event = {"ts": "2026-12-02T12:30:01.000Z", "event": "job.failed.final", "job_id": "r-1", "workflow": "build",
             "conversation": "c1", "reason": "step Test: exit 2"}
    assert line(event) == {"time": "12:30:01", "what": "run r-1 failed for good: step Test: exit 2",
                           "conversation": "c1", "run": "r-1"}
    assert line({"ts": "t", "event": "some.thing_new", "reason": HOSTILE})["what"] == f"some thing new: {HOSTILE}"
    state = {"queue": [], "in_flight": [], "dead_total": 0, "dead_letters": [], "runs": [], "channels": [],
             "heartbeats": {}, "events": [event]}
    html = page.sections(state).split('<section id="events">', 1)[1]
    row, raw = html.split('<details class="json"', 1)
    assert "{" not in row and "&quot;event&quot;: &quot;job.failed.final&quot;" in raw and " open" not in raw


def test_spend_per_day_is_each_providers_usd_and_tokens_from_the_usage_totals() -> None:
    from datetime import date

    from gateway.dashboard.service import spend_per_day
    from orchestrator.usage.records import MemoryUsageRecords, Spent

    records = MemoryUsageRecords()
    today = date(2026, 12, 2)
    records.add(today, {"provider": "claude", "sender": "a"}, Spent(usd=0.25, tokens_in=100, tokens_out=20, turns=1))
    records.add(today, {"provider": "claude"}, Spent(usd=0.5, tokens_in=10, turns=1))
    records.add(date(2026, 11, 30), {"provider": "codex"}, Spent(usd=1.0, tokens_out=7, turns=1))
    records.add(date(2026, 11, 1), {"provider": "codex"}, Spent(usd=9.0, turns=1))  # a month ago: not shown
    days = spend_per_day(records, today, 7)["days"]
    assert [day["day"] for day in days] == [f"2026-11-{d}" for d in range(26, 31)] + ["2026-12-01", "2026-12-02"]
    assert days[-1]["providers"] == {"claude": {"usd": 0.75, "tokens": 130}}
    assert days[-3]["providers"] == {"codex": {"usd": 1.0, "tokens": 7}}
    assert sum(len(day["providers"]) for day in days) == 2
    html = glance(Minutes(lambda: NOW).series(), {"days": days})
    assert 'data-day="2026-12-02" data-provider="claude" data-value="0.75"' in html
    assert 'data-day="2026-12-02" data-provider="claude" data-value="130"' in html
