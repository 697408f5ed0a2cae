"""The postgres backend owns the pool its stores share (gateway/backends/postgres/backend.py,
gateway/backends/postgres/db.py SharedPool):
every store one backend opens, opened once or twice, takes its connections from that one pool, which
closes with the backend; a store built alone (as tests build them) has a pool of its own, kept by no one
else (no process-wide pool): its connections close when the store is let go. Connections are counted as
the server sees them (pg_stat_activity)."""

from __future__ import annotations

import time
import uuid

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from gateway.composition import open_backend
from gateway.home import Home
from gateway.settings import QueueSettings, Settings
from orchestrator.storage.stores import open_history, open_run_store, open_sessions


def _named(dsn: str) -> tuple[str, str]:
    """`dsn` under an application_name of its own, and that name."""
    name = f"sy_pool_{uuid.uuid4().hex[:10]}"
    return make_conninfo(dsn, application_name=name), name


def _connections(dsn: str, name: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)).fetchone()
    return int(row[0]) if row else 0


def _until_none(dsn: str, name: str) -> None:
    """Waits until the server has no connection named `name` left (its processes end just after the close)."""
    deadline = time.monotonic() + 10
    while _connections(dsn, name):
        assert time.monotonic() < deadline, f"{_connections(dsn, name)} connection(s) still open"
        time.sleep(0.01)


def test_every_store_one_backend_opens_shares_its_pool_which_closes_with_it(
        db: str, home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    dsn, name = _named(db)
    monkeypatch.setenv("SWITCHYARD_DSN", dsn)
    backend = open_backend(home, Settings(queue=QueueSettings(backend="postgres", fsync=False)))
    first, second = open_run_store(backend), open_run_store(backend)  # the same store opened twice
    assert first.recent(5) == [] and second.active_runs() == {}
    locks = backend.locks(holder="a")
    assert locks.acquire("job:x")
    assert backend.pairing().read() == {"pending": {}, "approved": {}}
    assert open_sessions(backend).records.read(("claude", "c1")) == {}
    assert open_history(backend).records.read(("c1",)) == {}
    assert _connections(db, name) == 1  # one at a time: the pool's one connection serves every store
    backend.close()
    _until_none(db, name)
    assert locks.acquire("job:x")  # a use after the close opens the pool again
    assert _connections(db, name) == 1
    backend.close()
    _until_none(db, name)


def test_a_store_built_without_a_backend_has_a_pool_no_one_else_keeps(db: str) -> None:
    from gateway.backends.postgres.locks import PgLocks

    dsn, name = _named(db)
    store = PgLocks(dsn, holder="a")
    assert store.acquire("job:x")
    assert _connections(db, name) == 1
    del store
    _until_none(db, name)


async def test_a_stopped_gateway_leaves_no_connection_of_its_backend_open(
        db: str, home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.app import Gateway
    from gateway.plugin_manager import build_plugin_manager

    dsn, name = _named(db)
    monkeypatch.setenv("SWITCHYARD_DSN", dsn)
    settings = Settings(queue=QueueSettings(backend="postgres", fsync=False), channels=[])
    gateway = Gateway(home, settings, build_plugin_manager(settings))
    await gateway.start()
    try:
        assert gateway.backend.pairing().read() == {"pending": {}, "approved": {}}  # the backend's pool in use
        assert _connections(db, name) >= 2  # processing's own pools, and the backend's
    finally:
        await gateway.stop()
    _until_none(db, name)  # while `gateway` (and its backend) is still held
