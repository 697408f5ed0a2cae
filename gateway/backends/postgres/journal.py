"""The delivery journal on the PostgreSQL backend: the parts of a reply already sent are kept on the reply's
outbox row (`parts_sent`, migration 0020: part index -> platform message id), so a restart or another host
taking the channel profile over sends only the rest; marking the row sent empties it.

Two handles on that one record: `PgJournal` (gateway.stores.DeliveryJournalStore) finds the row by delivery
key, as every backend's journal is addressed; gateway/backends/postgres/rows.py RowJournal is the record of the
row a running delivery holds the lease of (gateway.channelkit.delivery.SharedJournal, set around Channel.send
by gateway/runtime/sending.py), read with the head and written fenced by the lease. Both write a part with
PART_SENT and read the record with `sent_parts_of`.
"""

from __future__ import annotations

from typing import Any

from gateway.backends.postgres.db import SharedPool

PART_SENT = "parts_sent = parts_sent || jsonb_build_object(%s::text, %s::text)"
"""The assignment recording one sent part (params: its index, its platform message id)."""
KEYED = ("state = 'pending' AND (payload->>'channel') || '_' || (payload->>'messageId') || '_' "
         "|| (payload->>'timestamp') = %s")
"""The pending row whose reply has this delivery key (gateway.channelkit.delivery.delivery_key, in SQL)."""


def sent_parts_of(parts_sent: dict[str, Any] | None) -> dict[int, str]:
    """A row's `parts_sent` as a journal gives it: part index -> platform message id."""
    return {int(index): str(pid) for index, pid in (parts_sent or {}).items()}


class PgJournal:
    """The delivery journal (gateway.stores.DeliveryJournalStore) of the replies waiting in `switchyard_outbox`,
    by delivery key: one record for every process and host. A part is recorded only on a reply waiting for
    delivery (a pending row): `record` raises LookupError for any other key, so no later part is sent
    unrecorded."""

    def __init__(self, dsn: str, pool: SharedPool | None = None):
        self.pool = pool or SharedPool(dsn)  # its backend's; its own when built alone (tests)
        self._own_pool = pool is None

    def sent_parts(self, key: str) -> dict[int, str]:
        with self.pool.lone() as conn:
            row = conn.execute(f"SELECT parts_sent FROM switchyard_outbox WHERE {KEYED} ORDER BY id LIMIT 1",
                               (key,)).fetchone()
        return sent_parts_of(row[0] if row else None)

    def record(self, key: str, index: int, platform_id: str) -> None:
        with self.pool.lone() as conn:
            changed = conn.execute(f"UPDATE switchyard_outbox SET {PART_SENT} WHERE {KEYED}",
                                   (str(index), platform_id, key)).rowcount
        if changed == 0:
            raise LookupError(f"no reply waiting for delivery has the key {key!r}")

    def forget(self, key: str) -> None:
        with self.pool.lone() as conn:
            conn.execute(f"UPDATE switchyard_outbox SET parts_sent = '{{}}' WHERE {KEYED}", (key,))

    def close(self) -> None:
        """Closes its own pool; its backend's is closed with the backend."""
        if self._own_pool:
            self.pool.close()
