"""`switchyard usage` and `switchyard usage reset` through the CLI's entry (gateway.cli.main) on the file backend,
and once on PostgreSQL as a process (SWITCHYARD_TEST_DSN): the table by each kind, --since, --json, reset of one
key or --all, days counted in `usage.timezone`, and an unreachable database said in one line with exit 2."""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

import orchestrator.usage.cli
from gateway.cli import main
from gateway.home import Home
from orchestrator.storage.files.usage import FileUsageRecords
from orchestrator.usage.cli import agent_time, first_day
from orchestrator.usage.records import Spent
from tests.backends.postgres.helpers import pg_home, switchyard

NOW = datetime.now(ZoneInfo("UTC"))  # one instant for the module: a run across midnight still sees one "today"
TODAY = NOW.date()
ALICE = {"sender": "telegram/tg/alice", "conversation": "telegram/tg/c1", "profile": "tg", "provider": "claude"}
BOB = {"sender": "telegram/tg/bob", "conversation": "telegram/tg/c1", "profile": "tg", "provider": "ollama"}


class _AtNow(datetime):
    """The CLI's clock held at NOW, so the days it counts are the days the records were written for."""

    @classmethod
    def now(cls, tz: tzinfo | None = None) -> datetime:  # type: ignore[override]
        return NOW.astimezone(tz)


@pytest.fixture(autouse=True)
def _clock_at_now(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(orchestrator.usage.cli, "datetime", _AtNow)


def cli(home: Home, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["--home", str(home.root), "usage", *args])
    out, err = capsys.readouterr()
    return code, out, err


def seed(home: Home) -> None:
    records = FileUsageRecords(home)
    records.add(TODAY, ALICE, Spent(usd=0.0123, tokens_in=1200, tokens_out=300, turns=1, seconds=3725))
    records.add(TODAY, BOB, Spent(tokens_in=50, tokens_out=10, turns=2, seconds=42))
    records.add(TODAY - timedelta(days=40), ALICE, Spent(usd=5.0, turns=1, seconds=1))


def test_the_table_shows_each_key_of_the_kind_asked_for(home: Home, capsys: pytest.CaptureFixture[str]) -> None:
    seed(home)
    code, out, _ = cli(home, capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"usage by sender, {TODAY.replace(day=1)} to {TODAY} (UTC)"
    assert lines[1].split() == ["key", "USD", "tokens", "in", "tokens", "out", "turns", "agent", "time"]
    assert lines[2].split() == ["telegram/tg/alice", "0.0123", "1,200", "300", "1", "1h", "02m"]
    assert lines[3].split() == ["telegram/tg/bob", "–", "50", "10", "2", "42s"]
    assert lines[4].split() == ["total", "0.0123", "1,250", "310", "3", "1h", "02m"]
    code, out, _ = cli(home, capsys, "--by", "conversation")
    assert [line.split()[0] for line in out.splitlines()[2:]] == ["telegram/tg/c1", "total"]


def test_json_and_since(home: Home, capsys: pytest.CaptureFixture[str]) -> None:
    seed(home)
    code, out, _ = cli(home, capsys, "--by", "provider", "--since", "60d", "--json")
    body = json.loads(out)
    assert code == 0 and body["first"] == (TODAY - timedelta(days=59)).isoformat() and body["last"] == str(TODAY)
    assert body["rows"] == [
        {"key": "claude", "usd": 5.0123, "tokens_in": 1200, "tokens_out": 300, "turns": 2, "seconds": 3726.0},
        {"key": "ollama", "usd": 0.0, "tokens_in": 50, "tokens_out": 10, "turns": 2, "seconds": 42.0}]
    code, out, _ = cli(home, capsys, "--by", "profile", "--since", (TODAY - timedelta(days=40)).isoformat(), "--json")
    assert json.loads(out)["rows"][0]["turns"] == 4
    code, out, _ = cli(home, capsys, "--since", "today", "--by", "profile", "--json")
    assert json.loads(out)["rows"][0]["turns"] == 3
    code, _, err = cli(home, capsys, "--since", "last tuesday")
    assert code == 2 and "--since 'last tuesday'" in err


def test_since_and_agent_time_read_as_documented() -> None:
    today = date(2026, 11, 28)
    assert first_day("today", today) == today and first_day("month", today) == date(2026, 11, 1)
    assert first_day("7d", today) == date(2026, 11, 22) and first_day("1w", today) == date(2026, 11, 22)
    assert first_day("2026-10-05", today) == date(2026, 10, 5)
    assert [agent_time(s) for s in (0, 42, 183, 3725, 90000)] == ["0s", "42s", "3m 03s", "1h 02m", "25h 00m"]


def test_reset_forgets_one_key_or_all_within_its_dates(home: Home, capsys: pytest.CaptureFixture[str]) -> None:
    seed(home)
    code, _, err = cli(home, capsys, "reset", "--by", "sender")
    assert code == 2 and "give a KEY or --all" in err
    code, out, _ = cli(home, capsys, "reset", "--by", "sender", "telegram/tg/alice")
    assert code == 0 and out.strip() == (f"forgot 1 day total of sender telegram/tg/alice from {TODAY.replace(day=1)} "
                                         f"to {TODAY}")
    code, out, _ = cli(home, capsys, "--since", "60d", "--json")
    assert [(row["key"], row["turns"]) for row in json.loads(out)["rows"]] == [
        ("telegram/tg/alice", 1), ("telegram/tg/bob", 2)], "the 40-day-old total is outside the reset's dates"
    code, out, _ = cli(home, capsys, "reset", "--by", "provider", "--all", "--since", "60d")
    assert code == 0 and out.startswith("forgot 3 day totals of every provider from")
    code, out, _ = cli(home, capsys, "--by", "provider", "--since", "60d")
    assert out.startswith("no usage by provider from")


def test_days_are_counted_in_the_settings_time_zone(home: Home, capsys: pytest.CaptureFixture[str]) -> None:
    ahead = NOW.astimezone(ZoneInfo("Pacific/Kiritimati")).date()  # UTC+14: a day ahead of UTC-12, always
    FileUsageRecords(home).add(ahead, ALICE, Spent(turns=1))
    home.settings_file.write_text("usage:\n  timezone: Pacific/Kiritimati\n")
    assert json.loads(cli(home, capsys, "--since", "today", "--json")[1])["rows"][0]["turns"] == 1
    home.settings_file.write_text("usage:\n  timezone: Etc/GMT+12\n")
    body = json.loads(cli(home, capsys, "--since", "today", "--json")[1])
    assert body["rows"] == [] and body["last"] < ahead.isoformat() and body["timezone"] == "Etc/GMT+12"


def test_not_a_home_is_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--home", str(tmp_path / "nowhere"), "usage"]) == 2
    assert "is not a Switchyard home" in capsys.readouterr().err
    assert not (tmp_path / "nowhere").exists()


def test_on_postgres_the_table_and_reset_read_the_database(tmp_path: Path, db: str) -> None:  # noqa: F811
    from orchestrator.storage.postgres.usage import PgUsageRecords

    PgUsageRecords(db).add(TODAY, ALICE, Spent(usd=0.5, tokens_in=10, tokens_out=5, turns=1, seconds=2))
    home = pg_home(tmp_path)
    result = switchyard(home, db, "usage", "--by", "provider", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["rows"] == [
        {"key": "claude", "usd": 0.5, "tokens_in": 10, "tokens_out": 5, "turns": 1, "seconds": 2.0}]
    result = switchyard(home, db, "usage", "reset", "--by", "provider", "claude")
    assert result.returncode == 0 and result.stdout.startswith("forgot 1 day total of provider claude")


def test_an_unreachable_database_is_one_line_and_exit_2(tmp_path: Path) -> None:
    dsn = "postgresql://someone:hunter2@127.0.0.1:1/none?connect_timeout=2"
    result = switchyard(pg_home(tmp_path), dsn, "usage")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("switchyard: cannot use the database at")
    assert "hunter2" not in result.stderr + result.stdout
