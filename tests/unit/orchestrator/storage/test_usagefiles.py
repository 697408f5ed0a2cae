"""The file backend's usage totals (orchestrator/storage/files/usage.py) beyond the contract: a turn is one line
appended to
its day's log, a line torn by a crash spoils nothing else, reads go on from where they stopped, no log for a day
with nothing, and retention."""

from __future__ import annotations

import json
import logging
from datetime import date, timedelta

import pytest

from gateway.home import Home
from orchestrator.storage.files import usage as usagefiles
from orchestrator.storage.files.usage import RETENTION_DAYS, FileUsageRecords
from orchestrator.usage.records import Spent

DAY = date(2026, 11, 27)
TURN = Spent(usd=0.5, tokens_in=10, tokens_out=2, turns=1, seconds=3.0)


def test_a_turn_is_one_line_appended_to_its_days_log(home: Home) -> None:
    records = FileUsageRecords(home)
    records.add(DAY, {"sender": "s", "provider": "claude"}, TURN)
    records.add(DAY, {"sender": "t"}, TURN)
    lines = [json.loads(line) for line in (home.state / "usage" / "2026-11-27.log").read_bytes().split(b"\n") if line]
    assert lines == [{"keys": {"sender": "s", "provider": "claude"}, "spent": [0.5, 10, 2, 1, 3.0]},
                     {"keys": {"sender": "t"}, "spent": [0.5, 10, 2, 1, 3.0]}]


def test_a_line_torn_by_a_crash_is_skipped_and_logged_and_the_next_turn_counts(
        home: Home, caplog: pytest.LogCaptureFixture) -> None:
    records = FileUsageRecords(home)
    records.add(DAY, {"sender": "s"}, TURN)
    with (home.state / "usage" / "2026-11-27.log").open("ab") as log_file:
        log_file.write(b'\n{"keys": {"sender": "s"}, "spe')  # a process killed in the middle of its write
    records.add(DAY, {"sender": "s"}, TURN)
    with caplog.at_level(logging.WARNING, logger="switchyard.orchestrator.usage"):
        assert FileUsageRecords(home).totals("sender", "s", DAY, DAY) == TURN + TURN
    assert any("cannot be read" in record.getMessage() for record in caplog.records)


def test_a_day_with_nothing_has_no_log_and_a_reset_forgets_what_came_before_it(home: Home) -> None:
    records = FileUsageRecords(home)
    records.add(DAY, {}, TURN)
    assert not (home.state / "usage").exists()
    records.add(DAY, {"sender": "s"}, TURN)
    assert records.reset("sender", None, DAY, DAY) == 1
    assert records.reset("sender", None, DAY, DAY) == 0  # nothing left to forget: no second line
    records.add(DAY, {"sender": "s"}, TURN)
    assert FileUsageRecords(home).totals("sender", "s", DAY, DAY) == TURN


def test_days_past_retention_go_when_a_new_days_log_is_made(home: Home) -> None:
    records = FileUsageRecords(home)
    old, kept = DAY - timedelta(days=RETENTION_DAYS + 1), DAY - timedelta(days=RETENTION_DAYS)
    for day in (old, kept):
        records.add(day, {"sender": "s"}, TURN)
    records.add(DAY, {"sender": "s"}, TURN)
    assert sorted(p.name for p in (home.state / "usage").glob("*.log")) == [f"{kept.isoformat()}.log",
                                                                          "2026-11-27.log"]


def test_reads_go_on_from_where_they_stopped(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    records = FileUsageRecords(home)
    for offset in range(30):
        records.add(DAY - timedelta(days=offset), {"sender": "s"}, TURN)
    applied: list[bytes] = []
    original = usagefiles._apply
    monkeypatch.setattr(usagefiles, "_apply", lambda totals, line, path: applied.append(line) or original(
        totals, line, path))
    first, last = DAY - timedelta(days=30), DAY
    assert records.totals("sender", "s", first, last).turns == 30 and len(applied) == 30
    assert records.totals("sender", "s", first, last).turns == 30 and len(applied) == 30, "nothing read again"
    FileUsageRecords(home).add(DAY, {"sender": "s"}, TURN)  # another process
    assert records.totals("sender", "s", first, last).turns == 31 and len(applied) == 31, "only the new line"
    path = home.state / "usage" / "2026-11-27.log"
    path.write_bytes(b"")  # a log replaced by a shorter one (restored from a copy) is read from its start
    records.add(DAY, {"sender": "s"}, TURN)
    assert records.totals("sender", "s", first, last).turns == 30
