"""Tool approvals in `switchyard_approvals` (gateway.stores.Approvals): an answer on any host settles it
once, by a conditional UPDATE (the row's lock makes a second answerer see the first one's)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import psycopg

from gateway.approvals import PENDING, SETTLED_KEPT_S, Approval
from gateway.backends.postgres.db import SharedPool

Connect = Callable[[], AbstractContextManager[psycopg.Connection[Any]]]
CLI_CONNECT_TIMEOUT_S = 5
SETTLE = ("UPDATE switchyard_approvals SET state = %s, settled_at = now(), record = %s::jsonb "
          "WHERE id = %s AND state = 'pending' RETURNING record")


class PgApprovals:
    """Approvals in the database of the postgres backend."""

    def __init__(self, connect: Connect):
        self._connect = connect

    @classmethod
    def pooled(cls, dsn: str, pool: SharedPool | None = None) -> PgApprovals:
        """For a gateway process: connections from its backend's pool (one of its own when None)."""
        shared = pool or SharedPool(dsn)
        return cls(lambda: shared.connection())

    @classmethod
    def direct(cls, dsn: str) -> PgApprovals:
        """For a command: one connection per operation, failing within seconds when the server is down."""
        return cls(lambda: psycopg.connect(dsn, connect_timeout=CLI_CONNECT_TIMEOUT_S))

    def request(self, approval: Approval) -> None:
        with self._connect() as conn:
            conn.execute("DELETE FROM switchyard_approvals WHERE state <> 'pending' "
                         "AND settled_at < now() - make_interval(secs => %s)", (SETTLED_KEPT_S,))
            conn.execute("INSERT INTO switchyard_approvals (id, state, record) VALUES (%s, %s, %s::jsonb)",
                         (approval.id, approval.state, json.dumps(approval.to_json())))

    def get(self, approval_id: str) -> Approval | None:
        with self._connect() as conn:
            row = conn.execute("SELECT record FROM switchyard_approvals WHERE id = %s", (approval_id,)).fetchone()
        return Approval.from_json(row[0]) if row is not None else None

    def pending(self) -> list[Approval]:
        with self._connect() as conn:
            rows = conn.execute("SELECT record FROM switchyard_approvals WHERE state = %s ORDER BY created_at, id",
                                (PENDING,)).fetchall()
        return sorted((Approval.from_json(row[0]) for row in rows), key=lambda a: (a.created_at, a.id))

    def settle(self, approval_id: str, state: str, *, choice: str | None = None, by: str | None = None,
               reason: str | None = None) -> tuple[Approval | None, bool]:
        current = self.get(approval_id)
        if current is None or not current.pending:
            return current, False
        done = current.settled(state, choice=choice, by=by, reason=reason, now=time.time())
        with self._connect() as conn:
            row = conn.execute(SETTLE, (state, json.dumps(done.to_json()), approval_id)).fetchone()
        if row is not None:
            return done, True
        return self.get(approval_id), False
