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


_POOLS: dict[str, Any] = {}
_POOLS_LOCK = threading.Lock()
SHARED_POOL_SIZE = 4
# How long a caller waits for a connection of the shared pool. Its callers run on the event loop, which
# stands still meanwhile (its own connections cannot finish connecting, and a restarting server waits
# for them before it starts again): a statement here takes well under a millisecond, so waiting longer
# than this means the database is away, and the caller's error is the better outcome.
SHARED_POOL_WAIT_S = 2.0


def shared_pool(dsn: str) -> Any:
    """This process's synchronous connection pool for `dsn` (a psycopg_pool.ConnectionPool), opened on
    first use: the stores the event loop calls synchronously (the outbox's pushes, runs, sessions,
    pairing) share it instead of each keeping connections. A connection is checked when it is taken if
    the server sent it something (gateway/pg/pools.py: no round trip for a healthy one), so a restarted
    server costs one reconnect, not an error."""
    with _POOLS_LOCK:
        pool = _POOLS.get(dsn)
        if pool is None:
            from psycopg_pool import ConnectionPool

            from gateway.pg.pools import check_if_signalled_sync

            pool = ConnectionPool(dsn, min_size=0, max_size=SHARED_POOL_SIZE, open=True, timeout=SHARED_POOL_WAIT_S,
                                  check=check_if_signalled_sync)
            _POOLS[dsn] = pool
        return pool


def close_shared_pools() -> None:
    """Closes every pool `shared_pool` opened (at the end of a process, or of a test)."""
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
    for pool in pools:
        pool.close()
