"""Where the database is: the DSN from the variable `queue.dsn_env` names, never from a file."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

from gateway.settings import QueueSettings, SettingsError
from gateway.telemetry.logs import hide_in_logs
from gateway.telemetry.redaction import dsn_passwords


def dsn_from_settings(settings: QueueSettings) -> str:
    """The DSN held by the environment variable `settings.dsn_env`; SettingsError when it is unset."""
    dsn = os.environ.get(settings.dsn_env, "").strip()
    if not dsn:
        raise SettingsError(f"queue.dsn_env: the environment variable {settings.dsn_env} is not set; "
                            f"it must hold the PostgreSQL DSN (e.g. postgresql://user@host:5432/db)")
    hide_in_logs(dsn_passwords(dsn))  # psycopg's pool logs libpq's errors, which may quote the password
    return dsn


SHARED_POOL_SIZE = 4
# How long a caller waits for a connection of the shared pool. Its callers run on the event loop, which
# stands still meanwhile (its own connections cannot finish connecting, and a restarting server waits
# for them before it starts again): a statement here takes well under a millisecond, so waiting longer
# than this means the database is away, and the caller's error is the better outcome.
SHARED_POOL_WAIT_S = 2.0


class SharedPool:
    """The synchronous connection pool (a psycopg_pool.ConnectionPool) the stores of one backend share:
    the stores the event loop calls synchronously (the outbox's pushes, runs, sessions, pairing, locks)
    take their connections here instead of each keeping its own. PostgresBackend (postgres/backend.py) owns
    one and closes it with the backend; a store built without one (tests) makes its own, whose
    connections close when the store is let go (nothing else holds it).

    Opened on first use, with no connection until one is asked for. A connection is checked when it is
    taken if the server sent it something (gateway/backends/postgres/pools.py: no round trip for a healthy one), so a
    restarted server costs one reconnect, not an error."""

    def __init__(self, dsn: str):
        self.dsn = dsn
        self._lock = threading.Lock()
        self._pool: Any = None
        self._held: Any = None  # the main thread's connection for lone statements, kept between them

    def get(self) -> Any:
        """The pool, opened on first use."""
        pool = self._pool
        if pool is not None:
            return pool
        with self._lock:
            if self._pool is None:
                from psycopg_pool import ConnectionPool

                from gateway.backends.postgres.pools import check_if_signalled_sync

                self._pool = ConnectionPool(self.dsn, min_size=0, max_size=SHARED_POOL_SIZE, open=True,
                                            timeout=SHARED_POOL_WAIT_S, check=check_if_signalled_sync)
            return self._pool

    def connection(self, timeout: float | None = None) -> Any:
        """A connection of the pool, as `ConnectionPool.connection` gives it (a context manager); on the
        main thread, the connection its lone statements kept is given back first, so it is this one."""
        if self._held is not None and threading.current_thread() is threading.main_thread():
            self._give_back()
        return self.get().connection(timeout)

    @contextlib.contextmanager
    def lone(self) -> Iterator[Any]:
        """A connection in autocommit for statements each atomic by itself (one round trip each, no
        `BEGIN`/`COMMIT`). The main thread's, where the event loop calls the stores one statement after
        another, is kept between such statements: no taking from and giving back to the pool, nor
        autocommit switched on and off, for each; it goes back to the pool at the main thread's next
        other use of the pool, or at the close. One the server ended is replaced before use, as the
        pool's are. Other threads take one from the pool for the statement (pools.lone_statement)."""
        import psycopg

        from gateway.backends.postgres.pools import check_if_signalled_sync, lone_statement

        if threading.current_thread() is not threading.main_thread():
            with lone_statement(self) as conn:
                yield conn
            return
        held = self._held
        if held is not None:
            try:
                check_if_signalled_sync(held)
            except psycopg.Error:
                self._give_back()  # closed or ended by the server: the pool discards it
                held = None
        if held is None:
            held = self.get().getconn()
            held.autocommit = True
            self._held = held
        yield held

    def _give_back(self) -> None:
        """Gives the main thread's kept connection back to the pool, as the pool's other users take it."""
        import psycopg

        held, self._held = self._held, None
        if held is None:
            return
        with contextlib.suppress(psycopg.Error):  # a broken connection: the pool discards it
            held.autocommit = False
        if self._pool is not None:
            self._pool.putconn(held)
        else:
            held.close()

    def close(self) -> None:
        """Closes the pool and its connections; a later use opens a new one."""
        self._give_back()
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
