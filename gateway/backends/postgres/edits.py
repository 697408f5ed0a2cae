"""Folding an edit into its waiting original row (gateway.stores.EditFolding on PostgreSQL).

The row is changed by `UPDATE ... WHERE state = 'queued' AND payload = <as read>`: a worker starts a row by
`UPDATE ... SET state = 'running' WHERE state = 'queued'` (gateway/backends/postgres/queue.py PgQueue.start, whose
Worker runs the payload that statement returns; a row claimed but not started is still 'queued'), so of the
two statements the second to reach the row sees the first's result: the edit is folded before the start, or
finds the row taken and is stored as a message of its own.
"""

from __future__ import annotations

from typing import Any

from gateway.channelkit.edits import edited_bytes
from gateway.models import IncomingPayload

WAITING = ("SELECT id, payload FROM switchyard_messages WHERE state = 'queued' AND channel = %s AND profile = %s "
           "AND conversation = %s ORDER BY id")
FOLD = ("UPDATE switchyard_messages SET payload = %s, updated_at = now() "
        "WHERE id = %s AND state = 'queued' AND payload = %s RETURNING id")


class PgEdits:
    """Edits folded into waiting rows, on a sync connection pool (psycopg_pool.ConnectionPool)."""

    def __init__(self, pool: Any):
        self.pool = pool

    def fold_edit(self, edit: IncomingPayload) -> bool:
        """True when the waiting row of the original now holds the edit's text."""
        if not edit.editOf:
            return False
        with self.pool.connection() as conn:
            rows = conn.execute(WAITING, (edit.channel, edit.profile, edit.conversation)).fetchall()
            for row_id, payload in rows:
                edited = edited_bytes(bytes(payload), edit)
                if edited is not None:
                    return conn.execute(FOLD, (edited, row_id, bytes(payload))).fetchone() is not None
        return False
