"""Scheduled prompts on a fake clock: which occurrences fire, catch_up after downtime, overlap with a run still
going, a restart between claim and enqueue, and two hosts racing on one store (orchestrator/schedules/scheduler.py)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from gateway.home import Home
from gateway.models import IncomingPayload
from gateway.settings import ChannelProfile, Settings
from gateway.telemetry.events import EventLog, read_events
from orchestrator.runs.state import RunState
from orchestrator.schedules.config import ScheduleConfig
from orchestrator.schedules.records import MemoryScheduleRecords
from orchestrator.schedules.scheduler import CLAIM_LEASE_S, Scheduler, schedule_message, scheduled_workflow
from orchestrator.schedules.times import next_after

T0 = datetime(2026, 11, 27, 8, 0, 0, tzinfo=UTC)
SETTINGS = Settings(channels=[ChannelProfile(id="ops", type="console")])
DELIVER = {"profile": "ops", "conversationId": "room-1"}


def every(seconds: float, **extra: Any) -> ScheduleConfig:
    return ScheduleConfig.model_validate({"every_sec": seconds, "prompt": "digest", "deliver": DELIVER, **extra})


class Host:
    """One process's Scheduler on a shared store, recording what it enqueues."""

    def __init__(self, records: MemoryScheduleRecords, schedules: dict[str, ScheduleConfig], events: EventLog, *,
                 holder: str = "box:100", alive: bool = True, runs: dict[str, RunState] | None = None):
        self.enqueued: list[IncomingPayload] = []
        self.fail_enqueue = False
        self.scheduler = Scheduler(records=records, schedules=lambda: schedules, enqueue=self._enqueue,
                                   settings=SETTINGS, events=events, load_run=({} if runs is None else runs).get,
                                   holder=holder,
                                   clock=lambda: T0, alive=lambda pid: alive)

    async def _enqueue(self, message: IncomingPayload) -> Path:
        if self.fail_enqueue:
            raise OSError("the process died here")
        self.enqueued.append(message)
        return Path("/dev/null")

    async def at(self, moment: datetime) -> None:
        await self.scheduler.tick(moment)


@pytest.fixture
def events(tmp_path: Path) -> EventLog:
    return EventLog(tmp_path / "events.jsonl")


def named(events: EventLog, name: str) -> list[dict[str, Any]]:
    return [e for e in read_events(events.path) if e["event"] == name]


async def test_each_occurrence_fires_once_with_a_message_built_from_the_schedule_and_its_time(events: EventLog) -> None:
    host = Host(MemoryScheduleRecords(), {"default/digest": every(60)}, events)
    await host.at(T0)  # first seen: nothing before now is due
    for second in (30, 60, 61, 90, 119, 120, 120):
        await host.at(T0 + timedelta(seconds=second))
    assert [m.timestamp for m in host.enqueued] == [int((T0 + timedelta(seconds=s)).timestamp() * 1000)
                                                    for s in (60, 120)]
    first = host.enqueued[0]
    assert (first.channel, first.profile, first.conversation, first.message, first.sender) == (
        "console", "ops", "room-1", "digest", "schedule")
    assert first.messageId == schedule_message("default/digest", every(60), T0 + timedelta(seconds=60),
                                               SETTINGS).messageId
    assert len(named(events, "schedule.fired")) == 2


@pytest.mark.parametrize(("policy", "fired", "skipped"), [("skip", 0, 5), ("last", 1, 4), ("all", 5, 0)])
async def test_catch_up_after_downtime(events: EventLog, policy: str, fired: int, skipped: int) -> None:
    host = Host(MemoryScheduleRecords(), {"default/d": every(600, catch_up=policy)}, events)
    await host.at(T0)
    await host.at(T0 + timedelta(seconds=3200))  # down for 53 min: five occurrences missed, the last by 200 s
    assert len(host.enqueued) == fired
    assert len(named(events, "schedule.skipped")) == skipped
    if policy == "last":
        assert host.enqueued[0].timestamp == int((T0 + timedelta(seconds=3000)).timestamp() * 1000)
    await host.at(T0 + timedelta(seconds=3600))  # back on time: the next one fires whatever the policy
    assert len(host.enqueued) == fired + 1


@pytest.mark.parametrize(("overlap", "run_state", "fires"), [("skip", "running", 1), ("queue", "running", 2),
                                                              ("skip", "done", 2)])
async def test_overlap_with_the_previous_occurrence_s_run(events: EventLog, overlap: str, run_state: str,
                                                           fires: int) -> None:
    runs: dict[str, RunState] = {}
    host = Host(MemoryScheduleRecords(), {"default/d": every(60, workflow="chat", overlap=overlap)}, events,
                runs=runs)
    await host.at(T0)
    await host.at(T0 + timedelta(seconds=60))
    first = host.enqueued[0]
    runs[first.messageId] = RunState.model_validate({  # the job's run (run id = its messageId)
        "runId": first.messageId, "workflowId": "chat", "orchestratorId": "default", "state": run_state,
        "message": json.loads(first.to_json()), "steps": {},
        "conversation": {"channel": "console", "channelProfileId": "ops", "conversationId": "room-1"}})
    await host.at(T0 + timedelta(seconds=120))
    assert len(host.enqueued) == fires
    if fires == 1:
        assert "still going" in named(events, "schedule.skipped")[0]["reason"]


async def test_a_claim_whose_process_died_before_enqueueing_is_fired_once_by_the_next_process(
        events: EventLog) -> None:
    records = MemoryScheduleRecords()
    schedules = {"default/d": every(60)}
    crashed = Host(records, schedules, events, holder="box:100")
    await crashed.at(T0)
    crashed.fail_enqueue = True  # claimed, then gone before the message was enqueued
    with pytest.raises(OSError):
        await crashed.at(T0 + timedelta(seconds=60))
    assert crashed.enqueued == [] and len(records.unfinished("default/d")) == 1

    alive_elsewhere = Host(records.twin(), schedules, events, holder="other:200")  # within the lease: waits
    await alive_elsewhere.at(T0 + timedelta(seconds=61))
    assert alive_elsewhere.enqueued == []
    restarted = Host(records.twin(), schedules, events, holder="box:101", alive=False)  # box:100 is gone
    await restarted.at(T0 + timedelta(seconds=62))
    await restarted.at(T0 + timedelta(seconds=63))
    assert [m.timestamp for m in restarted.enqueued] == [int((T0 + timedelta(seconds=60)).timestamp() * 1000)]
    assert records.unfinished("default/d") == []
    assert named(events, "schedule.fired")[0]["recovered"] is True


async def test_a_claim_abandoned_on_another_host_is_taken_over_after_the_lease(events: EventLog) -> None:
    records = MemoryScheduleRecords()
    crashed = Host(records, {"default/d": every(3600)}, events, holder="a:1")
    await crashed.at(T0)
    crashed.fail_enqueue = True
    with pytest.raises(OSError):
        await crashed.at(T0 + timedelta(hours=1))
    other = Host(records.twin(), {"default/d": every(3600)}, events, holder="b:1")
    await other.at(T0 + timedelta(hours=1, seconds=CLAIM_LEASE_S - 1))
    assert other.enqueued == []
    await other.at(T0 + timedelta(hours=1, seconds=CLAIM_LEASE_S + 1))
    assert len(other.enqueued) == 1


async def test_two_hosts_racing_fire_each_occurrence_once(events: EventLog) -> None:
    records = MemoryScheduleRecords()
    schedules = {"default/a": every(60), "default/b": every(90, catch_up="all")}
    hosts = [Host(records.twin(), schedules, events, holder=f"host{i}:1") for i in range(2)]
    for minute in range(0, 30):
        moment = T0 + timedelta(seconds=minute * 30)
        await asyncio.gather(*(host.at(moment) for host in hosts))
    ids = [m.messageId for host in hosts for m in host.enqueued]
    assert len(ids) == len(set(ids)) == 14 + 9  # (T0, T0+14.5 min]: 14 minutes, 9 ninety seconds


def test_cron_follows_its_time_zone_across_daylight_saving() -> None:
    schedule = ScheduleConfig.model_validate({"cron": "0 9 * * *", "timezone": "Europe/Paris", "prompt": "hi",
                                              "deliver": DELIVER})
    before = next_after(schedule, datetime(2026, 3, 27, 12, tzinfo=UTC))
    after = next_after(schedule, before)
    assert (before.hour, after.hour) == (8, 7)  # 09:00 CET, then 09:00 CEST


@pytest.mark.parametrize("bad", [{"cron": "61 * * * *"}, {"every_sec": 60, "cron": "* * * * *"}, {},
                                 {"every_sec": 60, "timezone": "Mars/Olympus"}, {"every_sec": 60, "prompt": ""}])
def test_a_schedule_that_cannot_fire_is_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ScheduleConfig.model_validate({"prompt": "hi", "deliver": DELIVER, **bad})


def test_a_workflow_schedule_is_a_job_of_that_workflow() -> None:
    message = schedule_message("default/w", every(60, workflow="deploy"), T0, SETTINGS)
    assert message.job is not None and message.job.job_id == message.messageId
    assert scheduled_workflow(IncomingPayload.model_validate_json(message.to_json())) == "deploy"


def _home_with_schedules(home: Home) -> Settings:
    """A home whose orchestrator `main` has two schedules, one of which fired once (in its file records)."""
    import yaml

    from gateway.config.yamlfile import load_yaml
    from orchestrator.config.default import DEFAULT_ORCHESTRATOR_YAML
    from orchestrator.storage.files.schedules import FileScheduleRecords

    home.settings_file.write_text(yaml.safe_dump({"channels": [{"id": "ops", "type": "console"}]}))
    workspace = home.root / "orchestrators" / "main"
    workspace.mkdir(parents=True, exist_ok=True)
    config = {**load_yaml(DEFAULT_ORCHESTRATOR_YAML), "schedules": {
        "digest": {"cron": "0 9 * * 1-5", "timezone": "Europe/Paris", "prompt": "digest", "deliver": DELIVER},
        "ping": {"every_sec": 600, "workflow": "demo", "deliver": DELIVER, "enabled": False}}}
    (workspace / "orchestrator.yaml").write_text(yaml.safe_dump(config))
    records = FileScheduleRecords(home, fsync=False)
    records.claim("main/digest", T0, "box:1", T0)
    records.finish("main/digest", T0, "skipped", detail="overlap: run r1 of an earlier occurrence is still going",
                   now=T0)
    return Settings.model_validate(yaml.safe_load(home.settings_file.read_text()))


def test_switchyard_schedules_lists_each_schedule_with_its_next_and_last_occurrence(home: Home) -> None:
    from gateway.plugin_manager import build_plugin_manager
    from orchestrator.storage.stores import backend_for

    settings = _home_with_schedules(home)
    backend = backend_for(home, settings)
    [rows] = build_plugin_manager().hook.switchyard_schedules(home=home, settings=settings, backend=backend)
    by_id = {row["schedule"]: row for row in rows}
    digest = by_id["main/digest"]
    assert digest["when"] == "0 9 * * 1-5 (Europe/Paris)" and digest["deliver"] == "ops/room-1"
    assert (digest["last"], digest["outcome"]) == (T0.isoformat(), "skipped") and "still going" in digest["detail"]
    assert datetime.fromisoformat(digest["next"]) > datetime.now(UTC)
    assert (by_id["main/ping"]["next"], by_id["main/ping"]["last"]) == (None, None)


def test_the_schedules_command_and_the_dashboard_show_them(home: Home, capsys: pytest.CaptureFixture[str]) -> None:
    from gateway.cli import main
    from gateway.dashboard.page import sections

    _home_with_schedules(home)
    assert main(["--home", str(home.root), "schedules"]) == 0
    printed = capsys.readouterr().out
    assert "main/digest" in printed and "skipped: overlap" in printed and "(disabled)" in printed
    assert main(["--home", str(home.root), "schedules", "--json"]) == 0
    assert {row["schedule"] for row in json.loads(capsys.readouterr().out)} == {"main/digest", "main/ping"}
    html = sections({"queue": [], "in_flight": [], "dead_total": 0, "dead_letters": [], "runs": [], "channels": [],
                     "heartbeats": {}, "events": [], "schedules": [{
                         "schedule": "main/<b>", "when": "every 60s", "deliver": "ops/r", "next": None,
                         "last": None, "outcome": None, "detail": None}]})
    assert "main/&lt;b&gt;" in html and 'id="schedules"' in html


async def test_a_workflow_schedule_starts_that_workflow_in_its_conversation_without_the_selector(
        make_context: Any, start: Any) -> None:
    """The Orchestrator started with an `enqueue` fires its schedules through it; a fired `workflow:` occurrence,
    handled, starts the named workflow (not the rules' default) for the deliver conversation."""
    posted: list[IncomingPayload] = []

    async def enqueue(message: IncomingPayload) -> Path:
        posted.append(message)
        return Path("/dev/null")

    context = make_context(enqueue=enqueue)
    context.settings = SETTINGS
    orchestrator = await start(context)
    assert orchestrator.scheduler is not None
    message = schedule_message("main/w", every(60, workflow="demo", prompt=""), T0, SETTINGS)
    [answer] = await orchestrator.handle(message)
    assert answer.conversationId == "room-1" and "(workflow demo)" in answer.message
    assert make_context().enqueue is None  # a process that takes nothing in (a postgres worker) fires nothing


def test_check_names_a_schedule_whose_profile_workflow_or_cron_is_wrong(home: Home,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from gateway.cli import main

    _home_with_schedules(home)
    config = home.root / "orchestrators" / "main" / "orchestrator.yaml"
    data = yaml.safe_load(config.read_text())
    data["schedules"]["digest"]["deliver"]["profile"] = "nowhere"
    data["schedules"]["ping"]["workflow"] = "missing"
    config.write_text(yaml.safe_dump(data))
    assert main(["--home", str(home.root), "check"]) == 2
    printed = capsys.readouterr()
    assert "unknown workflow 'missing'" in printed.out + printed.err
    data["schedules"]["ping"]["workflow"] = "demo"
    config.write_text(yaml.safe_dump(data))
    assert main(["--home", str(home.root), "check"]) == 2
    printed = capsys.readouterr()
    assert "schedules.digest.deliver.profile: no channel profile 'nowhere'" in printed.out + printed.err
    data["schedules"]["digest"]["cron"] = "0 25 * * *"
    config.write_text(yaml.safe_dump(data))
    assert main(["--home", str(home.root), "check"]) == 2
    printed = capsys.readouterr()
    assert "schedules.digest" in printed.out + printed.err and "cron" in printed.out + printed.err
