"""The file backend's usage totals (orchestrator/usagefiles.py) beyond the contract: the day file's format, an
unreadable day moved aside (not fatal), no file for a day with nothing, retention, and a month read from the
cache of parsed days."""

from __future__ import annotations

import json
import logging
import os
import time
from datetime import date, timedelta

import pytest

from gateway.home import Home
from orchestrator import usagefiles
from orchestrator.usage import Spent
from orchestrator.usagefiles import RETENTION_DAYS, FileUsageRecords

DAY = date(2026, 11, 27)
TURN = Spent(usd=0.5, tokens_in=10, tokens_out=2, turns=1, seconds=3.0)


def test_a_day_file_holds_each_kinds_totals(home: Home) -> None:
    FileUsageRecords(home, fsync=False).add(DAY, {"sender": "s", "provider": "claude"}, TURN)
    body = json.loads((home.state / "usage" / "2026-11-27.json").read_bytes())
    assert body == {"sender": {"s": [0.5, 10, 2, 1, 3.0]}, "provider": {"claude": [0.5, 10, 2, 1, 3.0]}}


def test_an_unreadable_day_is_moved_aside_and_logged_not_fatal(home: Home, caplog: pytest.LogCaptureFixture) -> None:
    records = FileUsageRecords(home, fsync=False)
    records.add(DAY, {"sender": "s"}, TURN)
    records.add(DAY + timedelta(days=1), {"sender": "s"}, TURN)
    path = home.state / "usage" / "2026-11-27.json"
    path.write_text('{"sender": {"s": [1, 2]}}')
    with caplog.at_level(logging.WARNING, logger="switchyard.orchestrator.usage"):
        assert records.totals("sender", "s", DAY, DAY + timedelta(days=1)) == TURN
    assert any("cannot be read" in record.getMessage() for record in caplog.records)
    assert not path.exists() and len(list(path.parent.glob("2026-11-27.json.*.bad"))) == 1
    path.write_bytes(b"\xff not json")
    records.add(DAY, {"sender": "s"}, TURN)
    assert records.totals("sender", "s", DAY, DAY) == TURN
    assert len(list(path.parent.glob("2026-11-27.json.*.bad"))) == 2


def test_a_day_with_nothing_left_has_no_file(home: Home) -> None:
    records = FileUsageRecords(home, fsync=False)
    records.add(DAY, {}, TURN)
    assert not (home.state / "usage" / "2026-11-27.json").exists()
    records.add(DAY, {"sender": "s"}, TURN)
    assert records.reset("sender", None, DAY, DAY) == 1
    assert not (home.state / "usage" / "2026-11-27.json").exists()


def test_days_past_retention_go_when_a_new_days_file_is_made(home: Home) -> None:
    records = FileUsageRecords(home, fsync=False)
    old, kept = DAY - timedelta(days=RETENTION_DAYS + 1), DAY - timedelta(days=RETENTION_DAYS)
    for day in (old, kept):
        records.add(day, {"sender": "s"}, TURN)
    records.add(DAY, {"sender": "s"}, TURN)
    assert sorted(p.name for p in (home.state / "usage").glob("*.json")) == [
        f"{kept.isoformat()}.json", "2026-11-27.json"]


def test_a_month_is_read_from_parsed_days_until_a_day_changes(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    records = FileUsageRecords(home, fsync=False)
    for offset in range(30):
        records.add(DAY - timedelta(days=offset), {"sender": "s"}, TURN)
    an_hour_ago = time.time() - 3600
    for path in (home.state / "usage").glob("*.json"):
        os.utime(path, (an_hour_ago, an_hour_ago))
    parsed: list[bytes] = []
    original = usagefiles._parse
    monkeypatch.setattr(usagefiles, "_parse", lambda data: parsed.append(data) or original(data))
    first, last = DAY - timedelta(days=30), DAY
    assert records.totals("sender", "s", first, last).turns == 30
    assert len(parsed) == 30
    assert records.totals("sender", "s", first, last).turns == 30 and len(parsed) == 30, "nothing parsed again"
    FileUsageRecords(home, fsync=False).add(DAY, {"sender": "s"}, TURN)  # another process
    assert records.totals("sender", "s", first, last).turns == 31
    assert len(parsed) == 32, "only the changed day is parsed again (once under add's lock, once to read)"
    assert records.totals("sender", "s", first, last).turns == 31
    assert len(parsed) == 33, "a day changed within the last second is parsed each time (it may change unseen)"
