"""What `switchyard schedules`, `switchyard status` and the dashboard show of each schedule: when it fires, where
its result goes, its next occurrence, and its last one with the outcome (from the backend's ScheduleRecords)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from orchestrator.schedules.config import ScheduleConfig
from orchestrator.schedules.reminders import Reminder, ReminderStore, of_conversation
from orchestrator.schedules.times import NEVER, next_after

if TYPE_CHECKING:
    from gateway.backends import Backend
    from gateway.home import Home
    from gateway.settings import Settings
    from orchestrator.schedules.records import ScheduleRecords

HEADERS = ["schedule", "when", "deliver to", "next", "last", "outcome"]


def configured(home: Home, settings: Settings) -> dict[str, ScheduleConfig]:
    """Every orchestrator's schedules, keyed `<orchestrator>/<schedule>` (those of a file that does not validate
    are left out: `switchyard check` names its problem)."""
    from orchestrator.agents.builtin import builtin_providers
    from orchestrator.config.loading import load_every_config

    loaded, _ = load_every_config(home, settings, set(settings.providers) | set(builtin_providers()))
    return {f"{each.orchestrator_id}/{name}": schedule for each in loaded
            for name, schedule in each.config.schedules.items()}


def schedule_rows(schedules: dict[str, ScheduleConfig], records: ScheduleRecords | None,
                  now: datetime | None = None) -> list[dict[str, Any]]:
    """One mapping per schedule: id, when, deliver, enabled, next, and the last occurrence's time, outcome,
    detail and messageId (None where it never fired, or the backend keeps no records)."""
    now = now or datetime.now(UTC)
    rows = []
    for key, schedule in sorted(schedules.items()):
        newest = records.latest(key) if records is not None else []
        last = newest[0] if newest else None
        when = schedule.cron if schedule.cron is not None else f"every {schedule.every_sec:g}s"
        rows.append({
            "schedule": key, "when": f"{when} ({schedule.timezone})" if schedule.cron else when,
            "deliver": f"{schedule.deliver.profile}/{schedule.deliver.conversationId}",
            "workflow": schedule.workflow, "enabled": schedule.enabled,
            "next": next_after(schedule, now).isoformat() if schedule.enabled else None,
            "last": last.occurrence.isoformat() if last else None,
            "outcome": (last.outcome or "firing") if last else None,
            "detail": last.detail if last else None, "messageId": last.message_id if last else None,
        })
    return rows


def rows_for(home: Home, settings: Settings, backend: Backend) -> list[dict[str, Any]]:
    """The rows of every configured schedule, then of every reminder made in chat, read from `backend`'s
    records."""
    from orchestrator.storage.stores import open_reminders, open_schedules

    schedules = configured(home, settings)
    records = open_schedules(backend)
    return schedule_rows(schedules, records) + reminder_rows(open_reminders(backend), records)


def table_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    """The rows as `switchyard schedules` prints them."""
    return [[row["schedule"], row["when"], row["deliver"], row["next"] or "(disabled)", row["last"] or "never",
             (row["outcome"] or "—") + (f": {row['detail']}" if row["detail"] else "")] for row in rows]


REMINDERS_COMMAND = "/reminders"


def reminder_rows(store: ReminderStore | None, records: ScheduleRecords | None,
                  now: datetime | None = None) -> list[dict[str, Any]]:
    """One mapping per stored reminder, in the rows' shape, `schedule` being `reminder:<id>` and `deliver` its
    conversation."""
    if store is None:
        return []
    now = now or datetime.now(UTC)
    rows = []
    for reminder in store.all():
        newest = records.latest(reminder.key) if records is not None else []
        last = newest[0] if newest else None
        try:
            upcoming = next_after(reminder.schedule(), now)
        except ValueError:
            upcoming = NEVER
        rows.append({
            "schedule": reminder.key, "when": reminder.when, "deliver": f"{reminder.profile}/{reminder.conversationId}",
            "workflow": None, "enabled": True, "next": upcoming.isoformat() if upcoming != NEVER else None,
            "last": last.occurrence.isoformat() if last else None,
            "outcome": (last.outcome or "firing") if last else None,
            "detail": last.detail if last else None, "messageId": last.message_id if last else None,
            "conversation": reminder.conversation, "text": reminder.text or None, "prompt": reminder.prompt or None,
        })
    return rows


def reminders_answer(store: ReminderStore | None, conversation: str, message: str) -> str:
    """`/reminders`: the conversation's reminders, numbered; `/reminders cancel N`: removes the N-th of them.
    Only the asking conversation's are listed or cancelled."""
    if store is None:
        return "Reminders are not kept on this backend."
    words = message.split()
    held = of_conversation(store, conversation)
    if len(words) >= 2 and words[1].lower() == "cancel":
        number = words[2] if len(words) > 2 else ""
        if not number.isdigit() or not 1 <= int(number) <= len(held):
            return f"Say /reminders cancel N, N from 1 to {len(held)}." if held else "There are no reminders here."
        chosen = held[int(number) - 1]
        if not store.remove(chosen.id):
            return f"Reminder {number} is gone already (it fired, or was cancelled)."
        return f"Cancelled reminder {number}: {_what(chosen)}"
    if not held:
        return "There are no reminders here. An agent sets one with its `remind` tool."
    lines = [f"{n}. {reminder.when}: {_what(reminder)}" for n, reminder in enumerate(held, 1)]
    return "\n".join(["Reminders of this conversation:", *lines, "Cancel one with /reminders cancel N."])


def _what(reminder: Reminder) -> str:
    said = reminder.text or f"prompt: {reminder.prompt}"
    return said if len(said) <= 80 else f"{said[:79]}…"
