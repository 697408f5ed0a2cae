"""Fires scheduled prompts: each occurrence due is claimed in the backend's ScheduleRecords (one process or host
wins it), then posted as a message through the gateway's own intake, so it gets the queue's ordering, retries,
dead letters and the selector (or the named workflow) like any chat message.

The message of an occurrence is always the same (its messageId is the schedule and occurrence time), so a claim
whose holder died before `finish` is enqueued again by whoever takes it over, and the queue's answered index
makes a copy that did get in a duplicate: each occurrence is answered once. Every pass takes `now` from the
clock it was given (tests give a fake one).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from gateway.aio import wait_event
from gateway.api import Outbox
from gateway.disk.locks import holder_process, pid_alive, process_name
from gateway.home import safe_name
from gateway.models import IncomingPayload, Job, OutgoingPayload
from gateway.settings import Settings
from gateway.telemetry import tracing
from gateway.telemetry.events import EventLog, now_ms
from orchestrator.runs.state import RunState, run_id_for
from orchestrator.schedules.config import ScheduleConfig
from orchestrator.schedules.records import Fire, ScheduleRecords
from orchestrator.schedules.reminders import SENDER as REMINDER_SENDER
from orchestrator.schedules.reminders import ReminderSchedule, ReminderStore, reminder_id
from orchestrator.schedules.times import next_after, occurrences, plan

log = logging.getLogger("switchyard.schedules")

CLAIM_LEASE_S = 60.0
"""A claim still unfinished this long after it was made is taken over by another host (one on the claimer's own
host takes it over at once when the claimer's process is gone)."""
POLL_S = 30.0
"""The longest wait between two passes (another host's leftovers are seen); a reloaded orchestrator.yaml
ends the wait at once (`wake`)."""
SENDER = "schedule"

T = TypeVar("T")


def utc_now() -> datetime:
    return datetime.now(UTC)


def schedule_message(key: str, schedule: ScheduleConfig, occurrence: datetime, settings: Settings) -> IncomingPayload:
    """The message an occurrence posts (the same every time it is built): in the `deliver` conversation, from
    the sender `schedule`; a `workflow` makes it a job of that workflow (no selector)."""
    profile = settings.profile(schedule.deliver.profile)
    if profile is None:
        raise LookupError(f"deliver.profile {schedule.deliver.profile!r} is not a configured channel profile")
    stamp = int(occurrence.timestamp() * 1000)
    text = schedule.text if isinstance(schedule, ReminderSchedule) else ""
    message_id = f"schedule-{safe_name(key)}-{stamp}"
    return IncomingPayload.model_validate({
        "channel": profile.type, "channelProfileId": profile.id, "sender": SENDER, "senderId": f"{SENDER}:{key}",
        "message": schedule.prompt or schedule.workflow or text, "timestamp": stamp, "messageId": message_id,
        "conversationId": schedule.deliver.conversationId,
        "job": Job(job_id=message_id) if schedule.workflow is not None else None,
        "schedule": {"id": key, "occurrence": occurrence.isoformat(), "workflow": schedule.workflow},
    })


def scheduled_workflow(message: IncomingPayload) -> str | None:
    """The workflow a scheduled message starts (`schedule.workflow`), else None."""
    schedule = (message.model_extra or {}).get("schedule")
    workflow = schedule.get("workflow") if isinstance(schedule, dict) else None
    return workflow if isinstance(workflow, str) and workflow else None


class Scheduler:
    """Fires the schedules `schedules()` returns (keyed `<orchestrator>/<schedule>`) through `enqueue`, and the
    reminders stored in `reminders` (keyed `reminder:<id>`): a prompt through `enqueue`, a text through `outbox`."""

    def __init__(self, *, records: ScheduleRecords, schedules: Callable[[], Mapping[str, ScheduleConfig]],
                 enqueue: Callable[[IncomingPayload], Awaitable[Any]], settings: Settings, events: EventLog,
                 load_run: Callable[[str], RunState | None], holder: str | None = None,
                 clock: Callable[[], datetime] = utc_now, alive: Callable[[int], bool] = pid_alive,
                 reminders: ReminderStore | None = None, outbox: Outbox | None = None):
        self.reminders = reminders
        self.outbox = outbox
        self._reminded: dict[str, ReminderSchedule] = {}  # as the last pass read them (wait_s needs no store call)
        self.records = records
        self.schedules = schedules
        self.enqueue = enqueue
        self.settings = settings
        self.events = events
        self.load_run = load_run
        self.holder = holder or process_name()
        self.clock = clock
        self.alive = alive
        self._woken = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    async def run(self) -> None:
        """Passes until cancelled: one now, then at each next occurrence (at most POLL_S apart), and one
        whenever `wake` is called (a schedule added meanwhile is due from then, not from the next poll)."""
        self._loop = asyncio.get_running_loop()
        while True:
            self._woken.clear()  # before the pass: a reload during it ends the next wait
            try:
                await self.tick()
            except Exception as exc:  # the database away, a full disk: the next pass tries again
                log.warning("schedules: a pass failed: %s", exc)
                self.events.emit("schedule.error", reason=str(exc)[:300])
            await wait_event(self._woken, self.wait_s())

    def wake(self) -> None:
        """Makes the next pass now: the schedules changed (callable from any thread)."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._woken.set)

    def wait_s(self) -> float:
        """How long until the next occurrence of any schedule (at most POLL_S)."""
        now = self.clock()
        every = [*self.schedules().values(), *self._reminded.values()]
        soonest = min((next_after(s, now) for s in every if s.enabled), default=None)
        wait = POLL_S if soonest is None else (soonest - now).total_seconds()
        return min(POLL_S, max(0.05, wait))

    async def tick(self, now: datetime | None = None) -> None:
        """One pass over every schedule: takes over abandoned claims, then claims and fires what is due."""
        now = now or self.clock()
        if self.reminders is not None:
            self._reminded = await self._read_reminders()
        for key, schedule in {**self.schedules(), **self._reminded}.items():
            if schedule.enabled:
                await self._pass(key, schedule, now)

    async def _read_reminders(self) -> dict[str, ReminderSchedule]:
        assert self.reminders is not None
        found: dict[str, ReminderSchedule] = {}
        for reminder in await _db(self.reminders.all):
            try:
                found[reminder.key] = reminder.schedule()
            except ValueError as exc:  # a hand-edited or older record: named, left alone
                log.warning("reminder %s cannot be scheduled: %s", reminder.id, exc)
        return found

    async def _pass(self, key: str, schedule: ScheduleConfig, now: datetime) -> None:
        for fire in await _db(self.records.unfinished, key):
            if self._abandoned(fire, now) and await _db(self.records.take_over, key, fire.occurrence, fire.holder,
                                                        self.holder, now):
                await self._fire(key, schedule, fire.occurrence, now, recovered=True)
        first_seen = schedule.created_at if isinstance(schedule, ReminderSchedule) and schedule.created_at else now
        since = await _db(self.records.since, key, min(first_seen, now))
        latest = await _db(self.records.latest, key, 1)
        after = max(since, latest[0].occurrence) if latest else since
        chosen = plan(schedule, occurrences(schedule, after, now), now)
        for moment, why in chosen.skip:
            if await _db(self.records.claim, key, moment, self.holder, now):
                await self._skip(key, moment, why, now)
        for moment in chosen.fire:
            if not await _db(self.records.claim, key, moment, self.holder, now):
                continue  # another process or host has it
            going = await self._still_going(key, schedule, moment) if schedule.overlap == "skip" else None
            if going is not None:
                await self._skip(key, moment, f"overlap: run {going} of an earlier occurrence is still going", now)
            else:
                await self._fire(key, schedule, moment, now)
        if isinstance(schedule, ReminderSchedule) and schedule.at is not None:
            await self._forget_fired(key, schedule.at)

    async def _forget_fired(self, key: str, at: datetime) -> None:
        """A one-off reminder whose occurrence ended (here or on another host) is removed."""
        latest = await _db(self.records.latest, key, 1)
        found = reminder_id(key)
        if self.reminders is not None and found and latest and latest[0].occurrence >= at and latest[0].outcome:
            await _db(self.reminders.remove, found)
            self._reminded.pop(key, None)

    def _abandoned(self, fire: Fire, now: datetime) -> bool:
        """A claim left unfinished: this process's own (its enqueue failed), one of a dead process on this host,
        or one older than CLAIM_LEASE_S."""
        if fire.holder == self.holder:
            return True
        host, pid = holder_process(fire.holder)
        if host == holder_process(self.holder)[0] and pid is not None and not self.alive(pid):
            return True
        return now - fire.claimed_at > timedelta(seconds=CLAIM_LEASE_S)

    async def _still_going(self, key: str, schedule: ScheduleConfig, moment: datetime) -> str | None:
        """The id of an unfinished run started by the schedule's last fired occurrence before `moment`."""
        for fire in await _db(self.records.latest, key, 5):
            if fire.occurrence >= moment or fire.outcome != "fired":
                continue
            try:
                message = schedule_message(key, schedule, fire.occurrence, self.settings)
            except LookupError:
                return None
            for run_id in (message.messageId, run_id_for(message)):
                run = await _db(self.load_run, run_id)
                if run is not None and not run.finished:
                    return run.runId
            return None
        return None

    async def _skip(self, key: str, moment: datetime, why: str, now: datetime) -> None:
        await _db(self.records.finish, key, moment, "skipped", detail=why, now=now)
        self.events.emit("schedule.skipped", schedule=key, occurrence=moment.isoformat(), reason=why)

    async def _fire(self, key: str, schedule: ScheduleConfig, moment: datetime, now: datetime, *,
                    recovered: bool = False) -> None:
        try:
            message = schedule_message(key, schedule, moment, self.settings)
        except LookupError as exc:
            await _db(self.records.finish, key, moment, "failed", detail=str(exc), now=now)
            self.events.emit("schedule.skipped", schedule=key, occurrence=moment.isoformat(), reason=str(exc))
            return
        if isinstance(schedule, ReminderSchedule):
            found = reminder_id(key)
            if self.reminders is None or found is None or await _db(self.reminders.get, found) is None:
                await self._skip(key, moment, "cancelled", now)  # cancelled after this pass read it
                return
        with tracing.span("schedule.fire", **{"switchyard.schedule": key}):  # the prompt's trace starts here
            if isinstance(schedule, ReminderSchedule) and schedule.text:
                await self._send(message, schedule.text)
            else:
                await self.enqueue(message)  # raising leaves the claim unfinished: the next pass enqueues it again
        await _db(self.records.finish, key, moment, "fired", message_id=message.messageId, now=now)
        self.events.emit("schedule.fired", schedule=key, occurrence=moment.isoformat(), messageId=message.messageId,
                         channel=message.channel, profile=message.profile, conversation=message.conversation,
                         late_s=round((now - moment).total_seconds(), 3), recovered=recovered or None)


    async def _send(self, message: IncomingPayload, text: str) -> None:
        """A text reminder's message, written to the outbox once: a claim taken over after a crash finds the
        copy its first holder wrote (its `workflowRunId` and `runState` are what Outbox.holds_result looks up)."""
        if self.outbox is None:
            raise RuntimeError("no outbox to send a reminder through")
        reply = OutgoingPayload.reply_to(message, "", agent=REMINDER_SENDER, timestamp=now_ms(),
                                         workflowRunId=message.messageId)
        payload = reply.model_copy(update={"message": text, "runState": "reminder"})
        if not await _db(self.outbox.holds_result, message.messageId, "reminder", channel=payload.channel,
                         message_id=message.messageId):
            await _db(self.outbox.write, payload)


async def _db(call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """A store call off the event loop (a database round trip, a file lock)."""
    return await asyncio.to_thread(call, *args, **kwargs)
