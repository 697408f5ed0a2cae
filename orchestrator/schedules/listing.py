"""What `switchyard schedules`, `switchyard status` and the dashboard show of each schedule: when it fires, where
its result goes, its next occurrence, and its last one with the outcome (from the backend's ScheduleRecords)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from orchestrator.schedules.config import ScheduleConfig
from orchestrator.schedules.times import next_after

if TYPE_CHECKING:
    from gateway.home import Home
    from gateway.settings import Settings
    from gateway.stores import Backend
    from orchestrator.schedules.records import ScheduleRecords

HEADERS = ["schedule", "when", "deliver to", "next", "last", "outcome"]


def configured(home: Home, settings: Settings) -> dict[str, ScheduleConfig]:
    """Every orchestrator's schedules, keyed `<orchestrator>/<schedule>` (those of a file that does not validate
    are left out: `switchyard check` names its problem)."""
    from orchestrator.agents.builtin import builtin_providers
    from orchestrator.config.models import load_every_config

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
    """The rows of every configured schedule, read from `backend`'s records."""
    from orchestrator.storage.stores import open_schedules

    schedules = configured(home, settings)
    return schedule_rows(schedules, open_schedules(backend) if schedules else None)


def table_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    """The rows as `switchyard schedules` prints them."""
    return [[row["schedule"], row["when"], row["deliver"], row["next"] or "(disabled)", row["last"] or "never",
             (row["outcome"] or "—") + (f": {row['detail']}" if row["detail"] else "")] for row in rows]
