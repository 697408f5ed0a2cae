"""Which messages were answered, on the PostgreSQL backend: `switchyard_answered` (migration 0001), one row
per answered identity (channel, profile, messageId: gateway.payloads.message_identity) with when it was
last answered; rows older than the duplicate window are deleted by gateway/backends/postgres/maintenance.py.

`PgAnswered` is the answered index of gateway.stores.AnsweredStore over that table. The statements that
answer a message together with other writes, in one transaction or one statement (the worker's store of a
message done, gateway/backends/postgres/answering.py and outbox.py; a late dead letter, latedead.py), are
built from the same pieces: RECORD (or its tail RECORDED), IN_WINDOW, FORGET.
"""

from __future__ import annotations

from gateway.backends.postgres.db import SharedPool
from gateway.models import IncomingPayload
from gateway.payloads import message_identity

RECORDED = "ON CONFLICT (identity) DO UPDATE SET answered_at = now()"
"""The tail of an INSERT INTO switchyard_answered (identity): a repeat answered again counts from now."""
RECORD = f"INSERT INTO switchyard_answered (identity) VALUES (%s) {RECORDED}"
IN_WINDOW = "answered_at > now() - make_interval(secs => %(window)s)"
"""Answered within the duplicate window `%(window)s` (seconds)."""
CONTAINS = f"SELECT EXISTS (SELECT 1 FROM switchyard_answered WHERE identity = %(identity)s AND {IN_WINDOW})"
FORGET = "DELETE FROM switchyard_answered WHERE identity = %s"


class PgAnswered:
    """The answered index (gateway.stores.AnsweredStore) in `switchyard_answered`: one table for every
    process and host, so a repeat is skipped whichever of them claims it; each call is one statement."""

    def __init__(self, dsn: str, *, window_sec: float, pool: SharedPool | None = None):
        self.window_sec = window_sec
        self.pool = pool or SharedPool(dsn)  # its backend's; its own when built alone (tests)
        self._own_pool = pool is None

    def contains(self, message: IncomingPayload) -> bool:
        with self.pool.lone() as conn:
            row = conn.execute(CONTAINS, {"identity": message_identity(message),
                                          "window": float(self.window_sec)}).fetchone()
        return bool(row and row[0])

    def record(self, message: IncomingPayload) -> None:
        with self.pool.lone() as conn:
            conn.execute(RECORD, (message_identity(message),))

    def forget(self, message: IncomingPayload) -> None:
        with self.pool.lone() as conn:
            conn.execute(FORGET, (message_identity(message),))

    def close(self) -> None:
        """Closes its own pool; its backend's is closed with the backend."""
        if self._own_pool:
            self.pool.close()
