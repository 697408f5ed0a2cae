"""The audit log in `switchyard_audit` (gateway.stores.AuditLog): an INSERT that keeps the first row of an id,
so a retried message on any host records its action once."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

import psycopg

from gateway.audit import AuditRecord, selected
from gateway.backends.postgres.db import SharedPool

Connect = Callable[[], AbstractContextManager[psycopg.Connection[Any]]]
CLI_CONNECT_TIMEOUT_S = 5


class PgAuditLog:
    """Audit records in the database of the postgres backend."""

    def __init__(self, connect: Connect):
        self._connect = connect

    @classmethod
    def pooled(cls, dsn: str, pool: SharedPool | None = None) -> PgAuditLog:
        """For a gateway process: connections from its backend's pool (one of its own when None)."""
        shared = pool or SharedPool(dsn)
        return cls(lambda: shared.connection())

    @classmethod
    def direct(cls, dsn: str) -> PgAuditLog:
        """For a command: one connection per operation, failing within seconds when the server is down."""
        return cls(lambda: psycopg.connect(dsn, connect_timeout=CLI_CONNECT_TIMEOUT_S))

    def append(self, record: AuditRecord) -> bool:
        with self._connect() as conn:
            row = conn.execute(
                "INSERT INTO switchyard_audit (id, at, by_whom, record) VALUES (%s, %s, %s, %s::jsonb) "
                "ON CONFLICT (id) DO NOTHING RETURNING id",
                (record.id, record.when(), record.by, json.dumps(record.to_json()))).fetchone()
        return row is not None

    def records(self, *, since: datetime | None = None, by: str | None = None) -> list[AuditRecord]:
        with self._connect() as conn:
            rows = conn.execute("SELECT record FROM switchyard_audit WHERE at >= %s ORDER BY at, id",
                                (since or datetime.fromtimestamp(0).astimezone(),)).fetchall()
        return selected([AuditRecord.from_json(row[0]) for row in rows], since, by)
