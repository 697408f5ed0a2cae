"""Schedule records on every backend (orchestrator/schedules/records.py): of all the handles racing to claim one
occurrence (processes on one home, hosts on one database) exactly one wins; an unfinished claim moves to one new
holder only; and what a schedule last did is read back on any handle. Then two Schedulers on two handles, ticked
at the same moments from two threads, fire each occurrence once between them."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

from gateway.models import IncomingPayload
from gateway.settings import ChannelProfile, Settings
from gateway.telemetry.events import EventLog
from orchestrator.schedules.config import ScheduleConfig
from orchestrator.schedules.scheduler import Scheduler
from tests.contract.backends import Backend

T0 = datetime(2026, 11, 27, 8, 0, tzinfo=UTC)
RACERS = 6


def race(calls: list[object]) -> list[object]:
    """Runs each call on a thread of its own, all released at once; their results in order."""
    gate = threading.Barrier(len(calls))
    results: list[object] = [None] * len(calls)

    def run(index: int, call: object) -> None:
        gate.wait()
        results[index] = call()  # type: ignore[operator]

    threads = [threading.Thread(target=run, args=(i, call)) for i, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def test_one_of_many_racing_handles_claims_an_occurrence(backend: Backend) -> None:
    handles = [backend.schedules() for _ in range(RACERS)]
    for minute in range(3):
        moment = T0 + timedelta(minutes=minute)
        won = race([lambda h=h, i=i, m=moment: h.claim("o/s", m, f"host{i}:1", T0) for i, h in enumerate(handles)])
        assert won.count(True) == 1, won
    assert not handles[0].claim("o/s", T0, "late:1", T0), "a claimed occurrence is never claimed again"
    assert [f.occurrence for f in handles[1].latest("o/s", 5)] == [T0 + timedelta(minutes=m) for m in (2, 1, 0)]


def test_an_unfinished_claim_moves_to_one_new_holder_and_a_finished_one_to_none(backend: Backend) -> None:
    first, second = backend.schedules(), backend.schedules()
    assert first.claim("o/s", T0, "dead:1", T0)
    assert [f.holder for f in second.unfinished("o/s")] == ["dead:1"]
    hosts = [backend.schedules() for _ in range(RACERS)]  # each its own handle, as hosts (and their pools) are
    moved = race([lambda h=h, i=i: h.take_over("o/s", T0, "dead:1", f"new{i}:1", T0) for i, h in enumerate(hosts)])
    assert moved.count(True) == 1
    new_holder = second.unfinished("o/s")[0].holder
    assert new_holder.startswith("new") and not first.take_over("o/s", T0, "dead:1", "other:1", T0)
    first.finish("o/s", T0, "fired", message_id="m-1", now=T0 + timedelta(seconds=1))
    assert second.unfinished("o/s") == [] and not second.take_over("o/s", T0, new_holder, "x:1", T0)
    fire = second.latest("o/s")[0]
    assert (fire.outcome, fire.message_id, fire.holder, fire.finished_at) == (
        "fired", "m-1", new_holder, T0 + timedelta(seconds=1))


def test_a_schedule_s_first_seen_time_is_set_once(backend: Backend) -> None:
    first, second = backend.schedules(), backend.schedules()
    assert first.since("o/s", T0) == T0
    assert second.since("o/s", T0 + timedelta(hours=1)) == T0
    assert second.since("o/other", T0 + timedelta(hours=1)) == T0 + timedelta(hours=1)


def test_two_hosts_ticking_together_fire_each_occurrence_once(backend: Backend, tmp_path: Path) -> None:
    settings = Settings(channels=[ChannelProfile(id="ops", type="console")])
    schedule = ScheduleConfig.model_validate({"every_sec": 60, "prompt": "p", "catch_up": "all",
                                              "deliver": {"profile": "ops", "conversationId": "c"}})
    enqueued: list[str] = []
    lock = threading.Lock()

    async def enqueue(message: IncomingPayload) -> Path:
        with lock:
            enqueued.append(message.messageId)
        return tmp_path

    hosts = [Scheduler(records=backend.schedules(), schedules=lambda: {"o/s": schedule}, enqueue=enqueue,
                       settings=settings, events=EventLog(tmp_path / f"events{i}.jsonl"), load_run=lambda _: None,
                       holder=f"host{i}:1") for i in range(2)]
    moments = [T0 + timedelta(seconds=20 * step) for step in range(16)]  # (T0, T0+5 min]: five occurrences
    # The hosts share one clock, as hosts do: neither ticks a moment before the other has ended the one before
    # (run freely, a host that fell behind looks like one whose claim is past CLAIM_LEASE_S, and is taken over).
    in_step = threading.Barrier(len(hosts))

    def ticking(host: Scheduler) -> None:
        for moment in moments:
            in_step.wait(30)
            asyncio.run(host.tick(moment))

    race([lambda h=h: ticking(h) for h in hosts])
    assert sorted(enqueued) == sorted(set(enqueued)) and len(enqueued) == 5, enqueued
