"""Where the database is: the DSN from the variable `queue.dsn_env` names, never from a file."""

from __future__ import annotations

import os
import threading
from typing import Any

from gateway.logs import hide_in_logs
from gateway.redaction import dsn_passwords
from gateway.settings import QueueSettings, SettingsError


def dsn_from_settings(settings: QueueSettings) -> str:
    """The DSN held by the environment variable `settings.dsn_env`; SettingsError when it is unset."""
    dsn = os.environ.get(settings.dsn_env, "").strip()
    if not dsn:
        raise SettingsError(f"queue.dsn_env: the environment variable {settings.dsn_env} is not set; "
                            f"it must hold the PostgreSQL DSN (e.g. postgresql://user@host:5432/db)")
    hide_in_logs(dsn_passwords(dsn))  # psycopg's pool logs libpq's errors, which may quote the password
    return dsn


def process_holder() -> str:
    """This process's name in the database (leases, process list): `<host>:<pid>:<start ns>`, unique
    even when a pid is reused."""
    global _HOLDER
    if _HOLDER is None:
        import socket
        import time

        _HOLDER = f"{socket.gethostname()}:{os.getpid()}:{time.time_ns()}"
    return _HOLDER


_HOLDER: str | None = None


SHARED_POOL_SIZE = 4
# How long a caller waits for a connection of the shared pool. Its callers run on the event loop, which
# stands still meanwhile (its own connections cannot finish connecting, and a restarting server waits
# for them before it starts again): a statement here takes well under a millisecond, so waiting longer
# than this means the database is away, and the caller's error is the better outcome.
SHARED_POOL_WAIT_S = 2.0


class SharedPool:
    """The synchronous connection pool (a psycopg_pool.ConnectionPool) the stores of one backend share:
    the stores the event loop calls synchronously (the outbox's pushes, runs, sessions, pairing, locks)
    take their connections here instead of each keeping its own. gateway/pg/storage.py's PgStorage owns
    one and closes it with the backend; a store built without one (tests) makes its own, whose
    connections close when the store is let go (nothing else holds it).

    Opened on first use, with no connection until one is asked for. A connection is checked when it is
    taken if the server sent it something (gateway/pg/pools.py: no round trip for a healthy one), so a
    restarted server costs one reconnect, not an error."""

    def __init__(self, dsn: str):
        self.dsn = dsn
        self._lock = threading.Lock()
        self._pool: Any = None

    def get(self) -> Any:
        """The pool, opened on first use."""
        pool = self._pool
        if pool is not None:
            return pool
        with self._lock:
            if self._pool is None:
                from psycopg_pool import ConnectionPool

                from gateway.pg.pools import check_if_signalled_sync

                self._pool = ConnectionPool(self.dsn, min_size=0, max_size=SHARED_POOL_SIZE, open=True,
                                            timeout=SHARED_POOL_WAIT_S, check=check_if_signalled_sync)
            return self._pool

    def connection(self, timeout: float | None = None) -> Any:
        """A connection of the pool, as `ConnectionPool.connection` gives it (a context manager)."""
        return self.get().connection(timeout)

    def close(self) -> None:
        """Closes the pool and its connections; a later use opens a new one."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
