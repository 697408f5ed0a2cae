"""Reminders on every backend (orchestrator/schedules/reminders.py ReminderStore): what one handle stores every
other reads back, of handles racing to remove one exactly one does; and two Schedulers on two handles (two
hosts on one database, two processes on one home), ticked at the same moments, send a one-off reminder once,
remove it, post a recurring one's prompt once per occurrence, never fire a cancelled one, and a claim taken
over from a holder that died after sending does not send again."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gateway.models import IncomingPayload, OutgoingPayload
from gateway.settings import ChannelProfile, Settings
from gateway.telemetry.events import EventLog
from orchestrator.schedules.reminders import Reminder, of_conversation
from orchestrator.schedules.scheduler import Scheduler
from tests.contract.backends import Backend
from tests.contract.test_schedules import RACERS, race

T0 = datetime(2026, 11, 27, 8, 0, tzinfo=UTC)
SETTINGS = Settings(channels=[ChannelProfile(id="ops", type="console")])


def reminder(rid: str, conversation: str = "conv:console/ops/c", **fields: Any) -> Reminder:
    return Reminder.model_validate({"id": rid, "conversation": conversation, "profile": "ops",
                                    "conversationId": conversation.rsplit("/", 1)[-1], "created_at": T0,
                                    **({"at": T0 + timedelta(seconds=2), "text": "stand up"} | fields)})


@dataclass
class SharedOutbox:
    """The outbox both hosts write to (one database, one home): what was written, looked up as holds_result does."""

    written: list[OutgoingPayload] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def write(self, payload: OutgoingPayload) -> str:
        with self.lock:
            self.written.append(payload)
        return payload.messageId

    def holds_result(self, run_id: str, run_state: str, *, channel: str, message_id: str) -> bool:
        with self.lock:
            return any(p.workflowRunId == run_id and p.runState == run_state and p.messageId == message_id
                       and p.channel == channel for p in self.written)


def test_a_reminder_stored_on_one_handle_is_read_and_removed_once_on_any(backend: Backend) -> None:
    first, second = backend.reminders(), backend.reminders()
    first.add(reminder("a"))
    first.add(reminder("b", "conv:console/ops/other", cron="0 9 * * *", at=None, text="", prompt="weekly"))
    assert [r.id for r in second.all()] == ["a", "b"]
    assert second.get("b") == first.get("b") and second.get("b").prompt == "weekly"  # type: ignore[union-attr]
    assert [r.id for r in of_conversation(second, "conv:console/ops/c")] == ["a"]
    handles = [backend.reminders() for _ in range(RACERS)]
    removed = race([lambda h=h: h.remove("a") for h in handles])
    assert removed.count(True) == 1
    assert first.get("a") is None and [r.id for r in second.all()] == ["b"] and not second.remove("a")


def _hosts(backend: Backend, tmp_path: Path, outbox: SharedOutbox, enqueued: list[str]) -> list[Scheduler]:
    lock = threading.Lock()

    async def enqueue(message: IncomingPayload) -> Path:
        with lock:
            enqueued.append(message.messageId)
        return tmp_path

    return [Scheduler(records=backend.schedules(), schedules=dict, enqueue=enqueue, settings=SETTINGS,
                      events=EventLog(tmp_path / f"events{i}.jsonl"), load_run=lambda _: None,
                      holder=f"host{i}:1", reminders=backend.reminders(), outbox=outbox)  # type: ignore[arg-type]
            for i in range(2)]


def test_two_hosts_send_a_one_off_once_remove_it_and_prompt_each_occurrence_once(backend: Backend,
                                                                                  tmp_path: Path) -> None:
    store = backend.reminders()
    store.add(reminder("once"))
    store.add(reminder("cron", cron="* * * * *", at=None, text="", prompt="check the build"))
    store.add(reminder("cancelled", text="never"))
    store.remove("cancelled")
    outbox, enqueued = SharedOutbox(), []  # type: ignore[var-annotated]
    hosts = _hosts(backend, tmp_path, outbox, enqueued)
    moments = [T0 + timedelta(seconds=20 * step) for step in range(10)]  # (T0, T0+3 min]: three minutes
    in_step = threading.Barrier(len(hosts))

    def ticking(host: Scheduler) -> None:
        for moment in moments:
            in_step.wait(30)
            asyncio.run(host.tick(moment))

    race([lambda h=h: ticking(h) for h in hosts])
    assert [(p.message, p.conversationId) for p in outbox.written] == [("stand up", "c")]
    assert len(enqueued) == 3 and len(set(enqueued)) == 3, enqueued  # 08:01, 08:02, 08:03
    assert [r.id for r in store.all()] == ["cron"]  # the one-off that fired is gone


def test_a_claim_taken_over_after_its_holder_sent_does_not_send_again(backend: Backend, tmp_path: Path) -> None:
    backend.reminders().add(reminder("once"))
    outbox = SharedOutbox()
    dead, alive = _hosts(backend, tmp_path, outbox, [])

    def died(*_: Any, **__: Any) -> None:
        raise RuntimeError("killed after sending, before finishing")  # what a kill -9 leaves: sent, unfinished

    dead.records.finish = died  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="killed"):  # Scheduler.run logs it and goes on; this host is gone
        asyncio.run(dead.tick(T0 + timedelta(seconds=3)))
    assert len(outbox.written) == 1 and alive.records.unfinished("reminder:once")
    asyncio.run(alive.tick(T0 + timedelta(minutes=5)))  # past the claim's lease: taken over
    assert len(outbox.written) == 1 and alive.records.latest("reminder:once")[0].outcome == "fired"
    assert backend.reminders().all() == []
