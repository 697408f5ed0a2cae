"""Provider sessions and conversation history in `switchyard_memory`, shared by every host.

A conversation's first message may be answered on one host and its next on another: the second host
continues the first one's CLI session and sees its exchanges. `hold` serialises the calls of one
session across hosts with a session-level advisory lock, on a connection of its own kept for the call:
the server releases it when the holder's process dies or its connection drops.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import psycopg
from psycopg.types.json import Jsonb

from gateway.backends.postgres.db import SharedPool
from gateway.storable import made_safe
from orchestrator.agents.sessions import Change, Record, SessionStore

# The lock key is 64 bits of md5(schema, provider, scope): the schema keeps two Switchyards sharing one
# database (or two tests) apart; advisory locks are per database.
LOCK = ("SELECT pg_advisory_lock(('x' || left(md5(current_schema() || chr(31) || %s || chr(31) || %s), 16))"
        "::bit(64)::bigint)")


class PgRecords:
    """Records of one kind ('session' or 'history') as rows of `switchyard_memory`."""

    def __init__(self, dsn: str, kind: str, pool: SharedPool | None = None):
        self._pool = pool or SharedPool(dsn)  # its backend's; its own when built alone (tests)
        self._kind = kind

    def read(self, key: tuple[str, ...]) -> Record:
        with self._pool.connection() as conn:
            row = conn.execute("SELECT record FROM switchyard_memory WHERE kind = %s AND key = %s",
                               (self._kind, list(key))).fetchone()
        return dict(row[0]) if row and isinstance(row[0], dict) else {}

    def update(self, key: tuple[str, ...], change: Change, *, durable: bool = True) -> None:
        """Reads, changes and writes the record in one transaction, the row locked: two hosts adding to
        one record at once both keep their change. Every change commits durably (`durable` is the files')."""
        with self._pool.connection() as conn, conn.transaction():
            conn.execute("INSERT INTO switchyard_memory (kind, key, record) VALUES (%s, %s, '{}') "
                         "ON CONFLICT DO NOTHING", (self._kind, list(key)))
            row = conn.execute("SELECT record FROM switchyard_memory WHERE kind = %s AND key = %s FOR UPDATE",
                               (self._kind, list(key))).fetchone()
            current = dict(row[0]) if row and isinstance(row[0], dict) else {}
            conn.execute("UPDATE switchyard_memory SET record = %s, updated_at = now() WHERE kind = %s AND key = %s",
                         (Jsonb(made_safe(change(current))), self._kind, list(key)))  # an answer's NUL: U+FFFD

    def every(self) -> Iterator[Record]:
        with self._pool.connection() as conn:
            rows = conn.execute("SELECT record FROM switchyard_memory WHERE kind = %s ORDER BY key",
                                (self._kind,)).fetchall()
        yield from (dict(row[0]) for row in rows if isinstance(row[0], dict))


class PgSessionStore(SessionStore):
    """The SessionStore on the database: records in `switchyard_memory`, `hold` across hosts."""

    def __init__(self, dsn: str, pool: SharedPool | None = None):
        super().__init__(PgRecords(dsn, "session", pool))
        self._dsn = dsn

    @asynccontextmanager
    async def hold(self, provider: str, scope: str) -> AsyncIterator[None]:
        """Runs the calls of one session one at a time on every host: the in-process lock first (one
        connection per session and process), then the session's advisory lock, held until the call ends."""
        async with super().hold(provider, scope), await psycopg.AsyncConnection.connect(
                self._dsn, autocommit=True) as conn:
            await conn.execute(LOCK, (provider, scope))
            yield
