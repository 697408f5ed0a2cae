"""The pools on a message's path (gateway.backends.postgres.pools): autocommit, and a connection the server dropped
is replaced before it is used, without a round trip for a healthy one."""

from __future__ import annotations

import time

import psycopg

from gateway.backends.postgres.pools import message_pool


def _end_server_process(dsn: str, pid: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as admin:  # ends only that server process
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        deadline = time.monotonic() + 10
        while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
            assert time.monotonic() < deadline
            time.sleep(0.01)


async def test_a_connection_the_server_ended_is_replaced_before_use(pg_dsn: str) -> None:
    pool = message_pool(pg_dsn, min_size=1, max_size=1, timeout=5)
    await pool.open()
    try:
        async with pool.connection() as conn:
            pid = conn.info.backend_pid
            assert conn.autocommit
        _end_server_process(pg_dsn, pid)
        async with pool.connection() as conn:
            assert conn.info.backend_pid != pid
            assert await (await conn.execute("SELECT 1")).fetchone() == (1,)
    finally:
        await pool.close()


def test_the_shared_pool_replaces_a_connection_the_server_ended_before_use(pg_dsn: str) -> None:
    from gateway.backends.postgres.db import SharedPool

    shared = SharedPool(pg_dsn)
    try:
        with shared.connection() as conn:
            pid = conn.info.backend_pid
        _end_server_process(pg_dsn, pid)
        with shared.connection() as conn:
            assert conn.info.backend_pid != pid
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        shared.close()


def test_the_main_threads_lone_statements_keep_one_connection_and_replace_it_once_the_server_ended_it(
        pg_dsn: str) -> None:
    """The stores' lone statements on the main thread (the event loop's) keep their connection between them,
    and one the server ended (a restart, a failover) is replaced before the next statement, not an error."""
    import threading

    from gateway.backends.postgres.db import SharedPool

    shared = SharedPool(pg_dsn)
    try:
        with shared.lone() as conn:
            pid = conn.info.backend_pid
            conn.execute("SELECT 1")
        with shared.lone() as conn:
            assert conn.info.backend_pid == pid and conn.autocommit, "kept between statements"
        other: list[int] = []

        def elsewhere() -> None:
            with shared.lone() as conn:
                other.append(conn.info.backend_pid)

        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join()
        assert other and other[0] != pid, "another thread takes its own from the pool"
        _end_server_process(pg_dsn, pid)
        with shared.lone() as conn:
            assert conn.info.backend_pid != pid
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        shared.close()
