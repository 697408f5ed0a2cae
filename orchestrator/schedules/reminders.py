"""Reminders: schedules an agent made in its conversation with the chat tool `remind` (docs/chat-tools.md).

Unlike orchestrator.yaml's schedules, a reminder's definition is stored in the backend (the ReminderStore
protocol; the in-memory one here, the file one in orchestrator/storage/files/reminders.py, PostgreSQL's in
orchestrator/storage/postgres/reminders.py; tests/contract/test_reminders.py checks them). The Scheduler fires
each one as a ReminderSchedule under the key `reminder:<id>`, through the same occurrence claims as the others,
so an occurrence fires once across restarts and hosts. A one-off (`at`) is removed once it fired; one removed
(`/reminders cancel N`) is never fired, even by a pass that read it before: the claimer looks it up again.
"""

from __future__ import annotations

import re
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, model_validator

from orchestrator.schedules.config import ScheduleConfig, ScheduleDeliver

KEY_PREFIX = "reminder:"
"""The schedule key of a reminder (`reminder:<id>`): apart from orchestrator.yaml's `<orchestrator>/<name>`."""
SENDER = "reminder"  # the agent a text reminder's message is sent as
_IN = re.compile(r"^in\s+(\d+(?:\.\d+)?)\s*(s|sec|secs|seconds?|m|min|mins|minutes?|h|hours?|d|days?|w|weeks?)$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class ReminderSchedule(ScheduleConfig):
    """A reminder as the Scheduler fires it: a cron expression or one time (`at`), and either a `text` sent to
    the conversation as it is or a `prompt` posted there for its workflow to answer."""

    at: datetime | None = None
    text: str = ""
    created_at: datetime | None = None  # occurrences count from here, not from when a scheduler first saw it

    @model_validator(mode="after")
    def _one_when_one_what(self) -> ReminderSchedule:  # replaces ScheduleConfig's: `at` is a when, `text` a what
        if (self.cron is None) == (self.at is None) or self.every_sec is not None:
            raise ValueError("give exactly one of a cron expression and a time")
        if bool(self.text.strip()) == bool(self.prompt.strip()):
            raise ValueError("give exactly one of `text` and `prompt`")
        return self


class Reminder(BaseModel):
    """One stored reminder: the conversation scope it belongs to (`conv:<channel>/<profile>/<conversation>`,
    from the calling turn's token), where it is delivered, when, and what it says."""

    model_config = ConfigDict(extra="ignore")

    id: str
    conversation: str
    profile: str
    conversationId: str  # noqa: N815 - the payload's own field name
    cron: str | None = None
    at: datetime | None = None
    timezone: str = "UTC"
    text: str = ""
    prompt: str = ""
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))

    @property
    def key(self) -> str:
        """The schedule key its occurrences are claimed under."""
        return f"{KEY_PREFIX}{self.id}"

    @property
    def when(self) -> str:
        """When it fires, as listed."""
        if self.cron:
            return f"{self.cron} ({self.timezone})"
        return f"once at {self.at.astimezone(UTC).strftime('%Y-%m-%d %H:%M:%S UTC') if self.at else '?'}"

    def schedule(self) -> ReminderSchedule:
        """What the Scheduler fires; a missed occurrence (downtime) still fires once (`catch_up: last`)."""
        return ReminderSchedule(cron=self.cron, at=self.at, timezone=self.timezone, text=self.text,
                                prompt=self.prompt, catch_up="last", overlap="queue", created_at=self.created_at,
                                deliver=ScheduleDeliver(profile=self.profile, conversationId=self.conversationId))


def reminder_id(key: str) -> str | None:
    """The id in a reminder's schedule key, or None for another schedule's key."""
    return key[len(KEY_PREFIX):] if key.startswith(KEY_PREFIX) else None


def new_id() -> str:
    return uuid.uuid4().hex[:12]


def parse_when(when: str, now: datetime) -> tuple[str | None, datetime | None]:
    """(cron, None) or (None, time) for `when`: "in 2h" (s, m, h, d, w), an ISO time (UTC when it names no
    offset), or a five-field cron expression. Raises ValueError saying what is accepted."""
    text = when.strip()
    found = _IN.match(text.lower())
    if found:
        delay = float(found.group(1)) * _UNIT_S[found.group(2)[0]]
        if delay <= 0:
            raise ValueError(f"{when!r} is now, not later")
        return None, now + timedelta(seconds=delay)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        from croniter import croniter

        if len(text.split()) == 5 and croniter.is_valid(text):
            return text, None
        raise ValueError(f"not a time: {when!r}; give 'in 2h' (s, m, h, d, w), an ISO time "
                         "(2026-12-24T09:00:00+01:00) or a cron expression ('0 9 * * 1-5')") from None
    moment = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    if moment <= now:
        raise ValueError(f"{when!r} is in the past")
    return None, moment.astimezone(UTC)


@runtime_checkable
class ReminderStore(Protocol):
    """The reminders of every conversation."""

    def add(self, reminder: Reminder) -> None:
        """Stores a new reminder."""

    def get(self, reminder_id: str) -> Reminder | None:
        """The reminder with this id, or None (removed, or never stored)."""

    def all(self) -> list[Reminder]:
        """Every reminder, oldest first."""

    def remove(self, reminder_id: str) -> bool:
        """Removes a reminder; False when it was gone already (another host cancelled it, or it fired)."""


def of_conversation(store: ReminderStore, conversation: str) -> list[Reminder]:
    """A conversation's reminders, oldest first: what `/reminders` numbers."""
    return [reminder for reminder in store.all() if reminder.conversation == conversation]


class MemoryReminders:
    """ReminderStore in this process (tests; the in-memory backend). `twin` is another handle on the same state."""

    def __init__(self) -> None:
        self._reminders: dict[str, Reminder] = {}
        self._lock = threading.Lock()

    def twin(self) -> MemoryReminders:
        other = MemoryReminders()
        other._reminders, other._lock = self._reminders, self._lock
        return other

    def add(self, reminder: Reminder) -> None:
        with self._lock:
            self._reminders[reminder.id] = reminder

    def get(self, reminder_id: str) -> Reminder | None:
        with self._lock:
            return self._reminders.get(reminder_id)

    def all(self) -> list[Reminder]:
        with self._lock:
            return sorted(self._reminders.values(), key=lambda r: (r.created_at, r.id))

    def remove(self, reminder_id: str) -> bool:
        with self._lock:
            return self._reminders.pop(reminder_id, None) is not None
