"""A message's answer stored at once on PostgreSQL: its replies, its identity as answered and its row done, in
one statement (gateway/backends/postgres/outbox.py store_done_statement) or, when a reply's name is taken or a
channel's replies replace earlier ones, in one transaction naming each. Of two handles answering one message
(a host taken for dead that was only slow), the first stores it and the other stores nothing."""

from __future__ import annotations

from psycopg.errors import UniqueViolation

from gateway.backends.postgres.answered import RECORD
from gateway.backends.postgres.errors import database_away
from gateway.backends.postgres.outbox import PgOutbox
from gateway.backends.postgres.queue import DatabaseAway, PgQueue
from gateway.models import IncomingPayload, OutgoingPayload
from gateway.payloads import message_identity
from gateway.spool.queue import Claimed


class PgAnswering:
    """The Worker's `store_answer` on PostgreSQL (gateway/runtime/worker.py)."""

    def __init__(self, queue: PgQueue, outbox: PgOutbox):
        self.queue = queue
        self.pool = queue.pool
        self.outbox = outbox

    def __call__(self, claimed: Claimed, message: IncomingPayload, replies: list[OutgoingPayload]) -> bool:
        """True when this call stored the answer; False when the message was done or dead already."""
        import psycopg

        try:
            stored = self._store(claimed.order[0], message_identity(message), replies)
        except psycopg.Error as exc:
            if database_away(exc):
                raise DatabaseAway(f"the database is unreachable: {type(exc).__name__}: {exc}") from exc
            raise
        self.queue.settled(claimed)
        return stored

    def _store(self, message_id: int, identity: str, replies: list[OutgoingPayload]) -> bool:
        checked = [self.outbox.prepared(reply) for reply in replies]
        statement = self.outbox.store_done_statement(message_id, identity, checked)
        if statement is not None:
            try:
                with self.pool.lone() as conn:
                    row = conn.execute(*statement).fetchone()
                return bool(row and row[0])
            except UniqueViolation:
                pass  # a reply's name was taken (another host, same millisecond): nothing was stored
        with self.pool.connection() as conn, conn.transaction(), conn.cursor() as cursor:
            row = cursor.execute("SELECT state FROM switchyard_messages WHERE id = %s FOR UPDATE",
                                 (message_id,)).fetchone()
            if row is None or row[0] in ("done", "dead"):
                return False
            for reply in checked:
                self.outbox.insert_sync(cursor, reply)
            cursor.execute(RECORD, (identity,))
            cursor.execute("UPDATE switchyard_messages SET state = 'done', holder = NULL, updated_at = now() "
                           "WHERE id = %s", (message_id,))
        return True
