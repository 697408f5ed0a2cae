"""Replies into `switchyard_outbox` instead of `queue/outgoing/`: the postgres backend's Outbox.

The delivery side (the owner of each channel profile) reads that table; this module only inserts.
Names, attachment checks and the heartbeat's `<messageId>.json` naming are every outbox's
(gateway.outbox.BaseOutbox).
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Sequence
from typing import Any

import psycopg

from gateway.backends.postgres.answered import RECORDED
from gateway.backends.postgres.db import SharedPool
from gateway.home import Home
from gateway.models import IncomingPayload, OutgoingPayload
from gateway.outbox import BaseOutbox, conversation_of
from gateway.storable import made_safe
from gateway.stores import Duplicate
from gateway.telemetry.events import EventLog

INSERT = ("INSERT INTO switchyard_outbox (name, channel, profile, conversation, payload) "
          "VALUES (%s, %s, %s, %s, %s::jsonb) ON CONFLICT (name) DO NOTHING RETURNING id")
REPLACE = ("INSERT INTO switchyard_outbox (name, channel, profile, conversation, payload) "
           "VALUES (%s, %s, %s, %s, %s::jsonb) ON CONFLICT (name) DO UPDATE SET payload = EXCLUDED.payload, "
           "state = 'pending', attempts = 0, next_attempt_at = now(), reason = NULL, sent_at = NULL RETURNING id")


class PgOutbox(BaseOutbox):
    """Writes replies as `switchyard_outbox` rows (a handler's pushes, a channel's direct replies).

    `write` is synchronous, as the Outbox protocol is: it uses its backend's shared psycopg pool. The
    worker inserts a message's replies inside the transaction that marks it done, through `insert` on
    that transaction's async cursor. The delivery side is woken by the database (NOTIFY), so
    `on_written` is never called.
    """

    def __init__(self, home: Home, events: EventLog, *, dsn: str, pool: SharedPool | None = None,
                 extra_roots: Sequence[str | os.PathLike[str]] = (), named_by_message_id: Collection[str] = ()):
        super().__init__(home, events, extra_roots=extra_roots, named_by_message_id=named_by_message_id)
        self.pool = pool or SharedPool(dsn)  # its backend's; its own when built alone (tests)

    def _statement(self, payload: OutgoingPayload, name: str) -> tuple[str, tuple[Any, ...]]:
        sql = REPLACE if payload.channel in self.named_by_message_id else INSERT
        columns = made_safe([payload.channel, payload.profile, conversation_of(payload)])  # as to_json makes them
        return sql, (name, *columns, json.dumps(json.loads(payload.to_json())))

    async def insert(self, cursor: Any, payload: OutgoingPayload) -> str:
        """Inserts a checked payload through an async cursor, inside the caller's transaction; returns its name."""
        while True:  # a name another host took: the next timestamp
            name = self.stamped(payload)
            await cursor.execute(*self._statement(payload, name))
            if await cursor.fetchone() is not None:
                return name

    def store_done_statement(self, message_id: int, identity: str | None,
                             replies: list[OutgoingPayload]) -> tuple[str, list[Any]] | None:
        """One statement (one transaction in autocommit, one round trip) marking the message `done` unless it
        is done or dead already, recording `identity` as answered (None: not), and inserting the checked
        `replies` in order, each only if the message was still open; its row is 1 when it was. None when a
        reply replaces an earlier one (the heartbeat's channels: use `insert`). A reply's name already
        taken fails the whole statement with UniqueViolation: then nothing was stored."""
        if any(reply.channel in self.named_by_message_id for reply in replies):
            return None
        parts = ["WITH done AS (UPDATE switchyard_messages SET state = 'done', updated_at = now() "
                 "WHERE id = %s AND state NOT IN ('done', 'dead') RETURNING id)"]
        params: list[Any] = [message_id]
        if identity is not None:
            parts.append(f"answered AS (INSERT INTO switchyard_answered (identity) SELECT %s FROM done {RECORDED})")
            params.append(identity)
        if replies:
            rows = []
            for order, reply in enumerate(replies):
                rows.append("(%s, %s, %s, %s, %s, %s)")
                params += [order, *self._statement(reply, self.stamped(reply))[1]]
            parts.append("replies AS (INSERT INTO switchyard_outbox (name, channel, profile, conversation, payload) "
                         "SELECT v.name, v.channel, v.profile, v.conversation, v.payload::jsonb FROM done, "
                         f"(VALUES {', '.join(rows)}) AS v (ord, name, channel, profile, conversation, payload) "
                         "ORDER BY v.ord)")
        return ", ".join(parts) + " SELECT count(*) FROM done", params

    def insert_sync(self, cursor: Any, payload: OutgoingPayload) -> str:
        """`insert` through a sync cursor, inside the caller's transaction; returns its name."""
        while True:  # a name another host took: the next timestamp
            name = self.stamped(payload)
            if cursor.execute(*self._statement(payload, name)).fetchone() is not None:
                return name

    def write(self, payload: OutgoingPayload) -> str:
        """Inserts one payload in its own transaction; returns its spec-002 name (the row's, no file's)."""
        payload = self.prepared(payload)
        with self.pool.connection() as conn, conn.transaction(), conn.cursor() as cursor:
            return self.insert_sync(cursor, payload)

    def holds_result(self, run_id: str, run_state: str, *, channel: str, message_id: str) -> bool:
        """Whether `switchyard_outbox` holds a reply carrying run `run_id` in `run_state` (pending, sent or
        dead): a result written just before a crash is recorded at recovery, not pushed again."""
        with self.pool.connection() as conn:
            row = conn.execute("SELECT 1 FROM switchyard_outbox WHERE payload->>'workflowRunId' = %s "
                               "AND payload->>'runState' = %s LIMIT 1", (run_id, run_state)).fetchone()
        return row is not None

    def close(self) -> None:
        """Nothing to release: the pool is its backend's, closed with it (gateway/backends/postgres/backend.py)."""


# The message taken in as `job`: its state, its first reply stored after it was taken in (not a progress note or
# draft), and whether its identity was answered before that (the worker then stored it done as a duplicate).
_REPLY_OR_DUPLICATE = (
    "SELECT m.state, (SELECT o.payload FROM switchyard_outbox o WHERE o.payload->>'messageId' = %(message_id)s "
    "AND NOT o.payload ? 'progressKey' AND o.channel = m.channel AND o.created_at >= m.enqueued_at "
    "ORDER BY o.id LIMIT 1), EXISTS (SELECT 1 FROM switchyard_answered a WHERE a.identity = m.identity "
    "AND a.answered_at < m.enqueued_at) FROM switchyard_messages m WHERE m.name = %(job)s")


class PgReplies:
    """The replies in `switchyard_outbox` (pending, sent or dead), as `switchyard send --wait` looks for them on
    the postgres backend, where replies never reach outgoing/ or sent/: on one connection, opened at the
    first look."""

    def __init__(self, dsn: str):
        self.dsn = dsn
        self._conn: psycopg.Connection[Any] | None = None

    def find(self, message: IncomingPayload, job: str) -> dict[str, Any] | Duplicate | None:
        """The first reply to the message taken in as `job`, Duplicate once it was stored done as a duplicate."""
        if self._conn is None:
            self._conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=10)
        row = self._conn.execute(_REPLY_OR_DUPLICATE, {"message_id": message.messageId, "job": job}).fetchone()
        if row is not None and row[1] is not None:
            reply: dict[str, Any] = row[1]
            return reply
        if row is not None and row[0] == "done" and row[2]:
            return Duplicate()
        return None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
