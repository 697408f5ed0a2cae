"""gateway/telemetry/alerts.py: failures told to the operators' conversation, grouped, stored in the outbox,
never about an alert's own failure. The clock is the test's; the outbox is the file backend's real one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.home import Home
from gateway.models import OutgoingPayload
from gateway.outbox import FileOutbox
from gateway.settings import Settings
from gateway.telemetry.alerts import Alerts
from gateway.telemetry.events import EventLog


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def settings(**alerts: Any) -> Settings:
    return Settings.model_validate({
        "channels": [{"id": "ops", "type": "telegram", "token_env": "OPS_TOKEN"}],
        "alerts": {"to": {"profile": "ops", "conversationId": "-10042"}, "group_wait_sec": 10,
                   "group_interval_sec": 60, **alerts}})


@pytest.fixture
def home(tmp_path: Path) -> Home:
    home = Home(tmp_path)
    home.create()
    return home


def build(home: Home, clock: Clock, outbox: Any = None, **alerts: Any) -> tuple[Alerts, EventLog, FileOutbox]:
    events = EventLog(home.events_file)
    files = FileOutbox(home, events, fsync=False)
    made = Alerts.configured(settings(**alerts), outbox or files, events, clock=clock)
    assert made is not None
    return made, events, files


def alert_messages(home: Home) -> list[dict[str, Any]]:
    return [json.loads(path.read_bytes()) for path in sorted(home.outgoing.glob("*.json"))]


def dead_letter(events: EventLog, number: int) -> None:
    events.emit("job.failed.final", job_id=f"2026-{number:03}-console-m{number}.json", state="failed_final",
                kind="message", channel="console", profile="console", conversation=f"c{number}",
                reason=f"failed 3 time(s): boom {number}", attempts=3)


def test_a_dead_letter_is_one_alert_in_the_operators_conversation_with_its_reason_and_dead_show(home: Home) -> None:
    clock = Clock()
    alerts, events, _ = build(home, clock)
    dead_letter(events, 1)
    assert alerts.tick() == 0  # waits for others to join it
    clock.now += 10
    assert alerts.tick() == 1
    [message] = alert_messages(home)
    assert (message["channel"], message["channelProfileId"], message["conversationId"]) == ("telegram", "ops", "-10042")
    assert "1 dead letter" in message["message"] and "boom 1" in message["message"]
    assert "`switchyard dead show 2026-001-console-m1.json`" in message["message"]
    clock.now += 600
    assert alerts.tick() == 0 and len(alert_messages(home)) == 1  # told once
    assert [e["count"] for e in _events(home, "alert.sent")] == [1]


def test_fifty_dead_letters_in_ten_seconds_are_one_grouped_alert(home: Home) -> None:
    clock = Clock()
    alerts, events, _ = build(home, clock)
    for number in range(50):
        dead_letter(events, number)
        clock.now += 0.2
        alerts.tick()
    clock.now += 10
    alerts.tick()
    clock.now += 120
    alerts.tick()
    [message] = alert_messages(home)
    lines = message["message"].splitlines()
    assert lines[0].endswith(": 50 dead letters")
    assert len(lines) == 12 and "and 40 more" in lines[-1]  # a readable message, not 50 lines


def test_alerts_after_one_message_wait_for_the_interval_and_go_out_together(home: Home) -> None:
    clock = Clock()
    alerts, events, _ = build(home, clock)
    dead_letter(events, 1)
    clock.now += 10
    assert alerts.tick() == 1
    dead_letter(events, 2)
    dead_letter(events, 3)
    clock.now += 30
    assert alerts.tick() == 0  # one message a minute at most
    clock.now += 30
    assert alerts.tick() == 2
    assert len(alert_messages(home)) == 2


def test_an_alert_that_cannot_be_delivered_does_not_alert_about_itself(home: Home) -> None:
    clock = Clock()
    alerts, events, _ = build(home, clock)
    dead_letter(events, 1)
    clock.now += 10
    alerts.tick()
    [name] = [path.name for path in home.outgoing.glob("*.json")]
    # what the delivery loop says of it: retried, then dead (the platform refused it)
    events.emit("outgoing.retry", file=name, channel="telegram", profile="ops", conversation="-10042", reason="429")
    events.emit("outgoing.failed", file=name, reason="the platform refused it: Forbidden", attempts=5)
    other = OutgoingPayload(channel="telegram", channelProfileId="ops", message="x", timestamp=1,
                            messageId="switchyard-alert-1-1", conversationId="-10042")
    # an alert an earlier process wrote
    events.emit("outgoing.failed", file=f"telegram_{other.messageId}_1.json", reason="gone", attempts=5)
    for _ in range(3):
        clock.now += 120
        alerts.tick()
    assert len(alert_messages(home)) == 1
    assert len(_events(home, "alert.sent")) == 1


def test_a_dead_reply_that_is_no_alert_is_told(home: Home) -> None:
    clock = Clock()
    alerts, events, _ = build(home, clock)
    events.emit("outgoing.failed", file="telegram_m7_1.json", reason="the platform refused it", attempts=5)
    clock.now += 10
    assert alerts.tick() == 1
    assert "dead reply telegram_m7_1.json" in alert_messages(home)[0]["message"]


class Refusing:
    """An outbox whose store is away (a database down) until `back` is set."""

    def __init__(self, files: Any = None) -> None:
        self.files = files
        self.back = False

    def write(self, payload: OutgoingPayload) -> Any:
        if not self.back:
            raise ConnectionError("the database is unreachable")
        return self.files.write(payload)


def test_an_alert_the_store_refuses_is_kept_and_written_when_it_is_back_with_no_alert_about_it(home: Home) -> None:
    clock = Clock()
    refusing = Refusing()
    alerts, events, files = build(home, clock, refusing, database_unreachable_sec=30)
    refusing.files = files
    events.emit("outbox.database_unreachable", reason="connection refused")
    clock.now += 29
    assert alerts.tick() == 0
    clock.now += 1
    alerts.tick()
    clock.now += 10
    assert alerts.tick() == 0  # refused: kept
    refusing.back = True
    events.emit("outbox.database_reconnected")
    clock.now += 60
    assert alerts.tick() == 2
    [message] = alert_messages(home)
    assert "unreachable for 30 s: connection refused" in message["message"]
    assert "reachable again" in message["message"]


def test_a_channel_retrying_past_its_minutes_is_told_once_until_it_starts(home: Home) -> None:
    clock = Clock()
    alerts, events, _ = build(home, clock, channel_retrying_min=5, group_wait_sec=0, group_interval_sec=0)
    events.emit("channel.retrying", channel="slack", profile="team", reason="connection refused", attempt=1)
    clock.now += 240
    assert alerts.tick() == 0
    events.emit("channel.retrying", channel="slack", profile="team", reason="connection refused", attempt=9)
    clock.now += 60
    assert alerts.tick() == 1
    clock.now += 600
    assert alerts.tick() == 0
    events.emit("channel.started", channel="slack", profile="team", attempt=20)
    events.emit("channel.disabled", channel="slack", profile="team", reason="token revoked", attempt=21)
    clock.now += 1
    assert alerts.tick() == 1
    first, second = (m["message"] for m in alert_messages(home))
    assert "channel team has been retrying for 5 min: connection refused" in first
    assert "channel team (slack) is disabled: token revoked" in second


def test_a_login_failure_a_limit_and_a_failed_run_are_told_and_send_picks_the_kinds(home: Home) -> None:
    clock = Clock()
    alerts, events, _ = build(home, clock, send=["provider_login", "usage_limit", "run_failed"])
    dead_letter(events, 1)  # not asked for
    events.emit("job.failed.final", job_id="m2.json", kind="message", conversation="c2",
                reason="claude is not logged in for the user running switchyard: run `claude` once")
    for _ in range(2):  # the same limit twice: told once
        events.emit("usage.limit_reached", kind="profile", key="console", window="day", unit="usd", used=5.2,
                    limit=5, resets_at="2026-12-03T00:00:00Z")
    events.emit("job.failed.final", job_id="r-1", state="failed_final", workflow="build", conversation="c3",
                reason="step Test: exit 2")
    clock.now += 10
    assert alerts.tick() == 3
    text = alert_messages(home)[0]["message"]
    assert "provider login failed: claude is not logged in" in text and "dead show m2.json" in text
    assert "usage limit reached: profile console used 5.2 of 5 usd per day" in text
    assert "run r-1 (workflow build, conversation c3) failed: step Test: exit 2" in text
    assert "boom 1" not in text


def test_alerts_to_a_profile_that_is_not_configured_are_refused() -> None:
    with pytest.raises(ValueError, match="alerts.to.profile: 'nope'"):
        Settings.model_validate({"alerts": {"to": {"profile": "nope"}}})


def _events(home: Home, name: str) -> list[dict[str, Any]]:
    from gateway.telemetry.events import read_events

    return [e for e in read_events(home.events_file) if e["event"] == name]
