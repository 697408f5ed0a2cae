"""ScheduleRecords on PostgreSQL (`switchyard_schedules`, `switchyard_schedule_fires`), shared by every host:
an occurrence is claimed by inserting its row ON CONFLICT DO NOTHING, so one host fires it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gateway.backends.postgres.db import SharedPool
from orchestrator.schedules.records import KEPT, Fire

COLUMNS = "schedule_id, occurrence, holder, claimed_at, outcome, detail, message_id, finished_at"


class PgScheduleRecords:
    """Claims and outcomes of every schedule in the backend's database."""

    def __init__(self, dsn: str, pool: SharedPool | None = None):
        self._pool = pool or SharedPool(dsn)  # its backend's; its own when built alone (tests)

    def since(self, schedule: str, now: datetime) -> datetime:
        with self._pool.connection() as conn:
            conn.execute("INSERT INTO switchyard_schedules (schedule_id, since) VALUES (%s, %s) "
                         "ON CONFLICT DO NOTHING", (schedule, now))
            row = conn.execute("SELECT since FROM switchyard_schedules WHERE schedule_id = %s", (schedule,)).fetchone()
        return row[0] if row else now

    def claim(self, schedule: str, occurrence: datetime, holder: str, now: datetime) -> bool:
        with self._pool.connection() as conn:
            claimed = conn.execute(
                "INSERT INTO switchyard_schedule_fires (schedule_id, occurrence, holder, claimed_at) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING 1",
                (schedule, occurrence, holder, now)).fetchone() is not None
            if claimed:
                conn.execute("DELETE FROM switchyard_schedule_fires WHERE schedule_id = %s AND occurrence < "
                             "(SELECT occurrence FROM switchyard_schedule_fires WHERE schedule_id = %s "
                             "ORDER BY occurrence DESC OFFSET %s LIMIT 1)", (schedule, schedule, KEPT - 1))
        return claimed

    def take_over(self, schedule: str, occurrence: datetime, holder: str, new_holder: str, now: datetime) -> bool:
        with self._pool.connection() as conn:
            return conn.execute(
                "UPDATE switchyard_schedule_fires SET holder = %s, claimed_at = %s WHERE schedule_id = %s "
                "AND occurrence = %s AND holder = %s AND outcome IS NULL RETURNING 1",
                (new_holder, now, schedule, occurrence, holder)).fetchone() is not None

    def finish(self, schedule: str, occurrence: datetime, outcome: str, *, detail: str | None = None,
               message_id: str | None = None, now: datetime) -> None:
        with self._pool.connection() as conn:
            conn.execute("UPDATE switchyard_schedule_fires SET outcome = %s, detail = %s, message_id = %s, "
                         "finished_at = %s WHERE schedule_id = %s AND occurrence = %s",
                         (outcome, detail, message_id, now, schedule, occurrence))

    def latest(self, schedule: str, limit: int = 1) -> list[Fire]:
        with self._pool.connection() as conn:
            rows = conn.execute(f"SELECT {COLUMNS} FROM switchyard_schedule_fires WHERE schedule_id = %s "
                                "ORDER BY occurrence DESC LIMIT %s", (schedule, limit)).fetchall()
        return [_fire(row) for row in rows]

    def unfinished(self, schedule: str) -> list[Fire]:
        with self._pool.connection() as conn:
            rows = conn.execute(f"SELECT {COLUMNS} FROM switchyard_schedule_fires WHERE schedule_id = %s "
                                "AND outcome IS NULL ORDER BY occurrence", (schedule,)).fetchall()
        return [_fire(row) for row in rows]


def _fire(row: Any) -> Fire:
    return Fire(*row)
