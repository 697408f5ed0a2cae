"""A run's end survives a crash of the database even with `queue.fsync: false`: its result goes out right after
it (a waiting message's reply, or a push), so an end lost in the crash would leave the run `running`, another
host would run it again and its result would go out twice (seen in tests/backends/postgres/test_restart_runs.py
with an immediate restart). A step's own writes may still be lost with fsync off: that only runs a step again."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from gateway.home import Home
from orchestrator.runs.state import Conversation, RunState, StepState, conversation_key
from orchestrator.storage.postgres.runs import PgRunStore
from tests.backends.postgres.throwaway import ThrowawayServer
from tests.fakes.orchestrator import make_message

pytestmark = pytest.mark.timeout(120)


def _crash_loses_async_commits(server: ThrowawayServer) -> None:
    """The WAL writer waits 10 s between flushes: a commit made without waiting for the WAL stays in the
    server's memory, and an immediate stop (a crash of its processes) loses it."""
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET wal_writer_delay = '10s'")
        conn.execute("ALTER SYSTEM SET wal_writer_flush_after = 0")
        conn.execute("SELECT pg_reload_conf()")


def test_a_run_ended_with_fsync_off_is_ended_after_the_database_crashes(tmp_path: Path,
                                                                       throwaway_pg: ThrowawayServer) -> None:
    _crash_loses_async_commits(throwaway_pg)
    home = Home(tmp_path / "home")
    home.create()
    message = make_message("build it")
    run = RunState(runId="r-1", workflowId="build", orchestratorId="main", message=message.model_dump(mode="json"),
                   conversation=Conversation(channel="console", conversationId="c1"), steps={"Plan": StepState()})
    store = PgRunStore(home, throwaway_pg.dsn, fsync=False)
    store.create(run, conversation_key(message))
    store.save(store.load("r-1").model_copy(update={"state": "running"}))  # type: ignore[union-attr]
    store.save(store.load("r-1").model_copy(update={"state": "done", "delivery": "reply"}))  # type: ignore[union-attr]
    store.pool.close()
    throwaway_pg.restart("immediate")
    after = PgRunStore(home, throwaway_pg.dsn, fsync=False)
    try:
        ended = after.load("r-1")
        assert ended is not None and ended.state == "done" and ended.delivery == "reply"
    finally:
        after.pool.close()
