"""The connection pools on a message's path: autocommit, checked without a round trip.

Every statement on that path is either a single statement (atomic by itself) or inside an explicit
`conn.transaction()`, so the pools' connections run in autocommit: no `BEGIN` and `COMMIT` round
trips around a lone statement. A connection is checked when it is taken only if its socket has
something to read: an idle connection with no LISTEN receives nothing unless the server closed it
or sent an error (a restart), so a healthy connection costs no round trip (psycopg_pool's own
`check_connection` costs one per use) and a dead one is still replaced before it is used.
"""

from __future__ import annotations

import contextlib
import select
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any, Protocol

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool


def _signalled(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Raises when the connection is closed; else whether the server sent it something (to be checked)."""
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("the connection is closed")
    poller = select.poll()  # not select.select: it refuses descriptors above 1023
    poller.register(conn.fileno(), select.POLLIN)
    return bool(poller.poll(0))  # readable, hung up or in error


async def check_if_signalled(conn: psycopg.AsyncConnection[Any]) -> None:
    """Raises when the connection is closed, or when the server sent it something and a real check fails."""
    if _signalled(conn):
        await AsyncConnectionPool.check_connection(conn)


def check_if_signalled_sync(conn: psycopg.Connection[Any]) -> None:
    """`check_if_signalled` for a synchronous pool."""
    if _signalled(conn):
        ConnectionPool.check_connection(conn)


async def set_autocommit(conn: psycopg.AsyncConnection[Any]) -> None:
    """Puts a new pool connection in autocommit."""
    await conn.set_autocommit(True)


def set_autocommit_sync(conn: psycopg.Connection[Any]) -> None:
    """`set_autocommit` for a synchronous pool."""
    conn.autocommit = True


class Connections(Protocol):
    """What gives connections: a ConnectionPool, or a backend's SharedPool (gateway/backends/postgres/db.py)."""

    def connection(self, timeout: float | None = None) -> AbstractContextManager[psycopg.Connection[Any]]: ...


@contextlib.contextmanager
def lone_statement(pool: Connections) -> Iterator[psycopg.Connection[Any]]:
    """A connection of a pool that is not in autocommit (gateway.backends.postgres.db.SharedPool), in autocommit for
    statements each atomic by itself: one round trip each instead of three (`BEGIN`, it, `COMMIT`).
    Given back as it was taken, so the pool's other users keep their implicit transaction."""
    with pool.connection() as conn:
        conn.autocommit = True
        try:
            yield conn
        finally:
            with contextlib.suppress(psycopg.Error):  # a broken connection: the pool discards it
                conn.autocommit = False


def sync_message_pool(dsn: str, *, min_size: int, max_size: int, **kwargs: Any) -> ConnectionPool:
    """The synchronous counterpart of `message_pool`, for the steps that run in a thread; no check (each
    use is one statement or one transaction, retried by its caller when the connection was broken)."""
    return ConnectionPool(dsn, min_size=min_size, max_size=max_size, open=False, configure=set_autocommit_sync,
                          **kwargs)


def message_pool(dsn: str, *, min_size: int, max_size: int, **kwargs: Any) -> AsyncConnectionPool:
    """An unopened autocommit pool, checked cheaply (above)."""
    return AsyncConnectionPool(dsn, min_size=min_size, max_size=max_size, open=False, configure=set_autocommit,
                               check=check_if_signalled, **kwargs)
