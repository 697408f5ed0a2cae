"""ReminderStore on PostgreSQL (`switchyard_reminders`), shared by every host: a removal is one DELETE, which
one host wins."""

from __future__ import annotations

import logging

from psycopg.types.json import Jsonb
from pydantic import ValidationError

from gateway.backends.postgres.db import SharedPool
from orchestrator.schedules.reminders import Reminder

log = logging.getLogger("switchyard.schedules")


class PgReminders:
    """The reminders of every conversation in the backend's database."""

    def __init__(self, dsn: str, pool: SharedPool | None = None):
        self._pool = pool or SharedPool(dsn)  # its backend's; its own when built alone (tests)

    def add(self, reminder: Reminder) -> None:
        with self._pool.connection() as conn:
            conn.execute("INSERT INTO switchyard_reminders (reminder_id, conversation, body, created_at) "
                         "VALUES (%s, %s, %s, %s) ON CONFLICT (reminder_id) DO UPDATE SET body = EXCLUDED.body",
                         (reminder.id, reminder.conversation, Jsonb(reminder.model_dump(mode="json")),
                          reminder.created_at))

    def get(self, reminder_id: str) -> Reminder | None:
        with self._pool.connection() as conn:
            row = conn.execute("SELECT body FROM switchyard_reminders WHERE reminder_id = %s",
                               (reminder_id,)).fetchone()
        return _reminder(row[0]) if row else None

    def all(self) -> list[Reminder]:
        with self._pool.connection() as conn:
            rows = conn.execute("SELECT body FROM switchyard_reminders ORDER BY created_at, reminder_id").fetchall()
        return [reminder for reminder in (_reminder(row[0]) for row in rows) if reminder is not None]

    def remove(self, reminder_id: str) -> bool:
        with self._pool.connection() as conn:
            return conn.execute("DELETE FROM switchyard_reminders WHERE reminder_id = %s RETURNING 1",
                                (reminder_id,)).fetchone() is not None


def _reminder(body: object) -> Reminder | None:
    try:
        return Reminder.model_validate(body)
    except ValidationError as exc:
        log.warning("cannot read a stored reminder: %s", exc)
        return None
