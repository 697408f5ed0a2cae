"""orchestrator/usage/meter.py: spending limits checked before a turn starts, counting the turns running now (each one
turn; of the other units the window's average per ended turn), each turn counted for its payer, a figure that is
no amount not counted, and what `/usage` tells a sender (their own spending; of a shared limit only whether it is
reached)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import yaml

from gateway.api import HandlerContext
from gateway.config.usage import UsageSettings
from gateway.home import Home
from gateway.settings import ProviderSettings, QueueSettings, Settings, SettingsError, load_settings
from gateway.telemetry.events import EventLog, read_events
from orchestrator import Orchestrator
from orchestrator.agents.providers import ProviderRunner
from orchestrator.agents.request import TurnRequest
from orchestrator.storage.files.runs import RunStore
from orchestrator.storage.files.usage import FileUsageRecords
from orchestrator.usage.meter import LimitReached, UsageMeter, window_of
from orchestrator.usage.records import MemoryUsageRecords, Payer, Spent, raw_text
from tests.fakes.clis import FakeClis
from tests.fakes.orchestrator import FakeOutbox, make_message
from tests.fakes.stores import file_sessions

NOW = datetime(2026, 11, 28, 21, 30, tzinfo=UTC)
ADA = Payer("console/console/ada", "console/console/c1", "console")
BOB = Payer("console/console/bob", "console/console/c1", "console")


def _meter(limits: list[dict[str, Any]], records: MemoryUsageRecords | None = None, *, timezone: str = "UTC",
           events: EventLog | None = None, now: datetime = NOW) -> UsageMeter:
    settings = UsageSettings.model_validate({"timezone": timezone, "limits": limits})
    return UsageMeter(records or MemoryUsageRecords(), settings, events, clock=lambda: now)


def test_a_turn_is_counted_for_the_sender_the_conversation_the_profile_and_the_provider() -> None:
    records = MemoryUsageRecords()
    meter = _meter([], records)
    meter.record(ADA, "claude", Spent(usd=0.25, tokens_in=1000, tokens_out=200, turns=1, seconds=3.5))
    day = NOW.date()
    for kind, key in (("sender", ADA.sender), ("conversation", ADA.conversation), ("profile", "console"),
                      ("provider", "claude")):
        assert records.totals(kind, key, day, day) == Spent(0.25, 1000, 200, 1, 3.5), kind
    assert records.totals("sender", BOB.sender, day, day) == Spent()


def test_the_limit_is_checked_before_the_turn_and_says_which_how_much_and_when_it_resets() -> None:
    meter = _meter([{"per": "sender", "day": {"usd": 1.0}}])
    meter.check(ADA, "claude")  # nothing spent yet
    meter.record(ADA, "claude", Spent(usd=0.6, turns=1))
    meter.check(ADA, "claude")  # $0.60 of $1.00: the next turn may start
    meter.record(ADA, "claude", Spent(usd=0.6, turns=1))  # the turn that crosses it finishes
    with pytest.raises(LimitReached) as reached:
        meter.check(ADA, "claude")
    text = reached.value.reply
    assert "daily limit of $1.00 per sender" in text and "$1.20 used" in text
    assert "resets at 00:00 UTC on 2026-11-29 (in 2 h 30 min)" in text
    meter.check(BOB, "claude")  # another sender of the same conversation is not limited by Ada's spending


def test_each_unit_and_window_is_limited() -> None:
    records = MemoryUsageRecords()
    earlier = date(2026, 11, 3)
    records.add(earlier, ADA.keys("codex"), Spent(tokens_in=900, tokens_out=100, turns=4, seconds=50))
    meter = _meter([{"per": "conversation", "month": {"tokens": 1000}}], records)
    with pytest.raises(LimitReached, match="monthly limit of 1,000 tokens for this conversation: 1,000 tokens used"):
        meter.check(ADA)
    assert "resets at 00:00 UTC on 2026-12-01" in str(_reached(_meter([{"per": "provider", "month": {"turns": 4}}],
                                                                      records), ADA, "codex"))
    meter = _meter([{"per": "profile", "day": {"agent_sec": 60}}], records)
    meter.check(ADA)  # the 50 s were spent on another day: today's window is empty


def test_a_rule_matching_one_key_replaces_the_general_one() -> None:
    records = MemoryUsageRecords()
    records.add(NOW.date(), ADA.keys(), Spent(turns=5))
    records.add(NOW.date(), BOB.keys(), Spent(turns=5))
    meter = _meter([{"per": "sender", "day": {"turns": 5}},
                    {"per": "sender", "match": ADA.sender, "day": {"turns": 50}}], records)
    meter.check(ADA)  # Ada was given more
    with pytest.raises(LimitReached):
        meter.check(BOB)


def test_days_and_months_begin_at_midnight_in_the_usage_time_zone() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    now = datetime(2026, 11, 30, 23, 30, tzinfo=UTC).astimezone(berlin)  # 00:30 on 1 December in Berlin
    assert window_of("day", now) == (date(2026, 12, 1), datetime(2026, 12, 2, tzinfo=berlin))
    assert window_of("month", now) == (date(2026, 12, 1), datetime(2027, 1, 1, tzinfo=berlin))
    records = MemoryUsageRecords()
    meter = _meter([{"per": "sender", "day": {"turns": 1}}], records, timezone="Europe/Berlin",
                   now=datetime(2026, 11, 30, 23, 30, tzinfo=UTC))
    meter.record(ADA, "claude", Spent(turns=1))
    assert records.totals("sender", ADA.sender, date(2026, 12, 1), date(2026, 12, 1)).turns == 1


def test_usage_shows_the_sender_their_own_spending_and_of_a_shared_limit_only_whether_it_is_reached() -> None:
    records = MemoryUsageRecords()
    meter = _meter([{"per": "sender", "day": {"usd": 2}}, {"per": "conversation", "day": {"usd": 5}}], records)
    meter.record(ADA, "claude", Spent(usd=0.42, tokens_in=12000, tokens_out=345, turns=7, seconds=192))
    meter.record(BOB, "claude", Spent(usd=4.5, tokens_in=1, turns=1, seconds=1))
    text = meter.report(ADA)
    assert "Your usage today: $0.42, 12,345 tokens, 7 turns, 3 min 12 s of agent time" in text
    assert "daily limit of $2.00 per sender: $0.42 used" in text
    assert "daily limit of $5.00 for this conversation: not reached" in text
    assert "4.5" not in text and "4.92" not in text  # nothing of what Bob spent, alone or added up
    meter.record(BOB, "claude", Spent(usd=1, turns=1))
    assert "for this conversation: reached; it resets at 00:00 UTC" in meter.report(ADA)


def test_a_turn_over_the_limit_is_not_started_and_every_turn_is_counted(home: Home, tmp_path: Path) -> None:
    calls: list[str] = []

    async def counting(prompt: str, request: dict[str, Any]) -> str:
        calls.append(prompt)
        return "answered"

    events = EventLog(home.events_file)
    records = MemoryUsageRecords()
    runner = ProviderRunner(home, {}, {"agent": counting}, sessions=file_sessions(home),
                            meter=_meter([{"per": "sender", "day": {"turns": 2}}], records, events=events,
                                         now=datetime.now(UTC)))
    call = TurnRequest("hello", tmp_path, conversation="conv:console/console/c1", payer=Payer.of(make_message("hi")))

    async def turn() -> str:
        result = await runner.run("agent", call)
        return result.stdout

    assert asyncio.run(turn()) == "answered" and asyncio.run(turn()) == "answered"
    with pytest.raises(LimitReached):
        asyncio.run(turn())
    assert len(calls) == 2  # the third turn never reached the agent
    recorded = [e for e in read_events(home.events_file) if e["event"] == "usage.recorded"]
    assert [e["provider"] for e in recorded] == ["agent", "agent"]
    assert [e["event"] for e in read_events(home.events_file)][-1] == "usage.limit_reached"


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0], ids=str)
def test_a_figure_that_is_no_amount_is_not_counted_and_is_named_in_an_event(home: Home, bad: float) -> None:
    events = EventLog(home.events_file)
    records = MemoryUsageRecords()
    meter = _meter([{"per": "sender", "day": {"usd": 1.0}}], records, events=events)
    meter.record(ADA, "claude", Spent(usd=1.0, turns=1))
    meter.record(ADA, "claude", Spent(usd=bad, tokens_in=5, turns=1, seconds=bad), run_id="r1",
                 invalid=[("total_cost_usd", "NaN")])  # as a preset read it (clis/base.py Figures)
    day = NOW.date()
    assert records.totals("sender", ADA.sender, day, day) == Spent(1.0, 5, 0, 2, 0.0)
    with pytest.raises(LimitReached, match=r"\$1.00 used"):  # the limit still holds
        meter.check(ADA, "claude")
    stored = read_events(home.events_file)
    assert [(e["provider"], e["field"], e["raw"], e["job_id"]) for e in stored if e["event"] == "usage.invalid"] == [
        ("claude", "total_cost_usd", "NaN", "r1"), ("claude", "usd", raw_text(bad), "r1"),
        ("claude", "seconds", raw_text(bad), "r1")]
    assert [e["usd"] for e in stored if e["event"] == "usage.recorded"] == [1.0, 0.0]


def test_the_turns_running_now_count_one_turn_each_and_say_so_in_the_reply() -> None:
    records = MemoryUsageRecords()
    meter = _meter([{"per": "sender", "day": {"turns": 3}}], records)
    meter.record(ADA, "claude", Spent(turns=1))
    first, second = meter.reserve(ADA, "claude"), meter.reserve(BOB, "claude")  # Bob is another sender
    assert first is not None and second is not None
    meter.reserve(ADA, "claude")
    with pytest.raises(LimitReached) as reached:  # 1 used and 2 running
        meter.reserve(ADA, "claude")
    assert "daily limit of 3 turns per sender: 3 turns used, counting 2 turns still running" in reached.value.reply
    meter.release(first)
    assert meter.reserve(ADA, "claude") is not None


def test_a_running_turn_counts_the_windows_average_cost_per_turn_and_nothing_before_any_turn_ended() -> None:
    records = MemoryUsageRecords()
    meter = _meter([{"per": "sender", "day": {"usd": 1.0}}], records)
    tokens = [meter.reserve(ADA, "claude") for _ in range(5)]  # no turn ended yet: nothing known of their cost
    for token in tokens:
        assert token is not None
        meter.release(token)
    meter.record(ADA, "claude", Spent(usd=0.6, turns=2))  # $0.30 a turn so far
    meter.reserve(ADA, "claude")  # $0.60 used, nothing running
    meter.reserve(ADA, "claude")  # $0.60 + one running at $0.30 < $1.00
    with pytest.raises(LimitReached, match=r"\$1.20 used, counting 2 turns still running"):
        meter.reserve(ADA, "claude")


def test_without_a_limit_nothing_is_reserved() -> None:
    records = MemoryUsageRecords()
    assert _meter([], records).reserve(ADA, "claude") is None
    assert records.running("sender", ADA.sender) == 0


def _reached(meter: UsageMeter, payer: Payer, provider: str) -> LimitReached:
    with pytest.raises(LimitReached) as reached:
        meter.check(payer, provider)
    return reached.value


@pytest.mark.parametrize(("usage", "says"), [
    ({"timezone": "Mars/Olympus"}, "settings.yaml: usage.timezone: unknown time zone 'Mars/Olympus'"),
    ({"limits": [{"per": "sender"}]}, "a limit needs `day:` or `month:`"),
    ({"limits": [{"per": "team", "day": {"usd": 1}}]}, "usage.limits.0.per"),
    ({"limits": [{"per": "sender", "day": {"dollars": 1}}]}, "usage.limits.0.day.dollars"),
])
def test_usage_settings_that_cannot_work_are_refused_naming_the_key(
        tmp_path: Path, usage: dict[str, Any], says: str) -> None:
    settings_file = tmp_path / "settings.yaml"
    settings_file.write_text(yaml.safe_dump({"usage": usage}))
    with pytest.raises(SettingsError) as refused:
        load_settings(settings_file)
    assert says in str(refused.value)


CLAUDE_AGENT = """
selector: {provider: rules}
diagnostics: {provider: rules}
reply_within_sec: 30
stream: false
rules: {default_workflow: chat}
agents:
  helper: {provider: claude, prompt: "{{message}}", fallback: echo}
workflows:
  chat:
    steps:
      - {id: Reply, agent: helper}
"""


@pytest.fixture
def claude_agent(home: Home, events: EventLog, outbox: FakeOutbox, write_config: Callable[[str], Path],
                 start: Callable[[HandlerContext], Any]) -> Callable[[], Any]:
    async def build() -> Orchestrator:
        write_config(CLAUDE_AGENT)
        settings = Settings(providers={"claude": ProviderSettings(type="claude")}, queue=QueueSettings(fsync=False))
        return await start(HandlerContext(home=home, settings=settings, events=events, outbox=outbox,  # type: ignore[no-any-return]
                                          queue_stats=dict))
    return build


async def test_what_a_claude_turn_cost_reaches_the_day_totals(
        fake_clis: FakeClis, home: Home, claude_agent: Callable[[], Any]) -> None:
    orchestrator = await claude_agent()
    [answer] = await orchestrator.handle(make_message("say hi", senderId="ada"))
    assert answer.message == "echo: say hi"  # the fake claude's answer
    today = orchestrator.meter.now().date()
    records = FileUsageRecords(home)
    spent = records.totals("sender", "console/console/ada", today, today)
    assert spent.turns == 1 and spent.usd == pytest.approx(0.011625) and spent.tokens == 5500 + 70
    assert records.totals("provider", "claude", today, today).usd == pytest.approx(0.011625)
    run = RunStore(home, fsync=False).load(str(answer.workflowRunId))
    assert run is not None and (run.steps["Reply"].model_extra or {})["usage"] == {
        "usd": pytest.approx(0.011625), "tokensIn": 5500, "tokensOut": 70}  # kept on the run's step too


async def test_an_agent_whose_cli_says_its_usage_limit_is_reached_answers_through_its_fallback(
        fake_clis: FakeClis, home: Home, claude_agent: Callable[[], Any]) -> None:
    fake_clis.scenario("claude", "usage_limit")
    orchestrator = await claude_agent()
    message = make_message("say hi", senderId="ada")
    [answer] = await orchestrator.handle(message)
    assert answer.message == "say hi"  # the built-in echo, the agent's fallback
    assert len(fake_clis.calls("claude")) == 1
    today = orchestrator.meter.now().date()
    by_provider = dict(FileUsageRecords(home).table("provider", today, today))
    assert by_provider["claude"].turns == 1 and by_provider["echo"].turns == 1  # the refused turn ran: counted
