"""How the run store talks to the database (orchestrator/storage/postgres/runs.py): each write one statement, atomic, in
autocommit, committed without waiting for the WAL only when the caller allows it, and the shared pool's
connections given back as they were taken (gateway.backends.postgres.pools.lone_statement)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from gateway.backends.postgres.db import SharedPool
from gateway.backends.postgres.pools import lone_statement
from gateway.home import Home
from orchestrator.runs.state import Conversation, RunState, StepState
from tests.fakes.orchestrator import make_message


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The text of every statement this process's synchronous connections execute."""
    texts: list[str] = []
    execute = psycopg.Connection.execute

    def recorded(self: psycopg.Connection[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        texts.append(str(query))
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", recorded)
    yield texts


def _store(db: str, tmp_path: Path) -> Any:
    from orchestrator.storage.postgres.runs import PgRunStore

    home = Home(tmp_path / "a")
    home.create()
    return PgRunStore(home, db, fsync=True)


def _run() -> RunState:
    return RunState(runId="r-1", workflowId="chat", orchestratorId="main",
                    message=make_message("hi").model_dump(mode="json"),
                    conversation=Conversation(channel="console", conversationId="c1"), steps={"Reply": StepState()})


def test_each_write_is_one_statement_and_only_a_durable_one_waits_for_the_wal(
        db: str, tmp_path: Path, sent: list[str]) -> None:
    store = _store(db, tmp_path)
    run = store.create(_run(), "console/console/c1", durable=False)  # the row, its event, the active run
    assert len(sent) == 1 and "set_config('synchronous_commit', 'off', true)" in sent[0]
    sent.clear()
    store.append_event(run.runId, "step.running", step="Reply")
    store.save(run.model_copy(update={"state": "running"}), durable=True)
    assert len(sent) == 1 and "synchronous_commit" not in sent[0]
    with store.pool.connection() as conn:  # the setting was the statement's own, not the session's
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
    assert store.load("r-1").state == "running"  # type: ignore[union-attr]
    assert [e["event"] for e in store.events("r-1")] == ["run.created", "step.running"]
    assert store.active_runs() == {"console/console/c1": "r-1"}


def test_a_write_whose_part_fails_stores_none_of_it(
        db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.storage.postgres import runs

    store = _store(db, tmp_path)
    monkeypatch.setattr(runs, "EVENTS", "INSERT INTO switchyard_run_events (run_id, record) SELECT %s, %s::json "
                                        "WHERE 1 / 0 = 1")  # the events part fails
    with pytest.raises(psycopg.errors.DivisionByZero):
        store.create(_run(), "console/console/c1", durable=False)
    assert store.load("r-1") is None and store.active_runs() == {}


def test_a_lone_statement_gives_the_connection_back_as_it_was_taken(db: str) -> None:
    pool = SharedPool(db)
    with lone_statement(pool) as conn:
        pid = conn.info.backend_pid
        conn.execute("CREATE TABLE p7_lone (x int)")  # committed at once: no transaction to end
    with pool.connection() as conn:
        assert conn.info.backend_pid == pid and not conn.autocommit
    with pytest.raises(ZeroDivisionError), pool.connection() as conn:  # the pool's users keep their transaction
        conn.execute("INSERT INTO p7_lone VALUES (1)")
        raise ZeroDivisionError
    with pool.connection() as conn:
        assert conn.execute("SELECT count(*) FROM p7_lone").fetchone() == (0,)


CHAT = {"selector": {"provider": "rules"}, "diagnostics": {"provider": "rules"}, "reply_within_sec": 60,
        "agents": {"helper": {"provider": "echo", "prompt": "{{message}}"}},
        "workflows": {"chat": {"description": "Echoes", "steps": [{"id": "Echo", "agent": "helper"}]}},
        "rules": {"default_workflow": "chat"}}


def pg_orchestrator(tmp_path: Path, db: str, monkeypatch: pytest.MonkeyPatch, config: dict[str, Any] | None = None,
                    **options: Any) -> Any:
    """An Orchestrator on the postgres backend over `tmp_path/a`, with `config` (CHAT) as its orchestrator.yaml
    and `options` (providers, max_parallel_runs) as Orchestrator's."""
    import yaml

    from gateway.api import HandlerContext
    from gateway.settings import QueueSettings, Settings
    from gateway.telemetry.events import EventLog
    from tests.fakes.orchestrator import FakeOutbox
    from tests.fakes.stores import orchestrator_for

    monkeypatch.setenv("SWITCHYARD_DSN", db)
    home = Home(tmp_path / "a")
    home.create()
    (home.orchestrators / "main").mkdir(parents=True, exist_ok=True)
    (home.orchestrators / "main" / "orchestrator.yaml").write_text(yaml.safe_dump(config or CHAT))
    settings = Settings(queue=QueueSettings(backend="postgres", fsync=False))
    context = HandlerContext(home=home, settings=settings, events=EventLog(home.events_file), outbox=FakeOutbox(),
                             queue_stats=dict)
    return orchestrator_for(context, **options)


async def test_a_chat_message_reads_its_run_once_claims_it_at_once_and_its_reply_is_the_run_as_recorded(
        tmp_path: Path, db: str, monkeypatch: pytest.MonkeyPatch, sent: list[str]) -> None:
    """The statements of one chat message (rules → a one-step run → its result as the reply): the run is read
    once, before it is created (a retried message's run), and claimed as it is created, its lock taken once
    (no claim pass reading the queue, no second take, no read back); the result handed to that message is
    the run as stored, delivery included."""
    from orchestrator.execution import claims

    monkeypatch.setattr(claims, "IDLE_SEC", 3600.0)  # no idle pass meanwhile: only the message's statements
    orchestrator = pg_orchestrator(tmp_path, db, monkeypatch)
    await orchestrator.start()
    try:
        [_] = await orchestrator.handle(make_message("warm", conversationId="c8"))  # the first pass is behind
        sent.clear()
        [reply] = await orchestrator.handle(make_message("hello there", conversationId="c9"))
    finally:
        await orchestrator.stop()
    def count(start: str) -> int:
        return sum(" ".join(text.split()).startswith(start) for text in sent)

    assert count("SELECT data::text FROM switchyard_runs WHERE run_id") == 1, sent
    assert count("WITH before AS (SELECT holder") == 1, sent  # the lock, taken once
    assert count("SELECT run_id, next_retry_at FROM switchyard_runs WHERE state = 'queued'") == 0, sent
    with psycopg.connect(db, autocommit=True) as conn:
        [(data,)] = conn.execute("SELECT data::text FROM switchyard_runs WHERE run_id = %s",
                                 (reply.workflowRunId,)).fetchall()
    stored = RunState.model_validate_json(data)
    assert reply.workflowRunId == stored.runId and reply.runState == "done" == stored.state
    assert stored.delivery == "reply" and "hello there" in reply.message


def test_a_lock_another_live_process_holds_is_refused_in_one_statement(db: str, sent: list[str]) -> None:
    """Every host's claim pass tries the queued runs other hosts reserved: each refusal is one round trip
    (who holds it comes back with it), and the holder keeps its lock."""
    from gateway.backends.postgres.locks import PgLocks

    holder = PgLocks(db, holder=f"elsewhere:{1}:1", ttl_s=600)
    assert holder.acquire("job:r-1")
    sent.clear()
    taker = PgLocks(db, holder="b", ttl_s=60)
    assert not taker.acquire("job:r-1") and len(sent) == 1
    assert taker.owner("job:r-1") == "elsewhere:1:1" and taker.reclaimed == 0


async def test_a_run_another_process_holds_is_tried_once_a_second_and_taken_once_free(
        tmp_path: Path, db: str, monkeypatch: pytest.MonkeyPatch, sent: list[str]) -> None:
    """A queued run reserved by another host is left to it: every claim pass of this one (each message it
    starts or ends wakes one) does not try its lock again, only once IDLE_SEC has passed; freed, it runs here."""
    import asyncio

    from gateway.backends.postgres.locks import PgLocks
    from gateway.testing import async_wait_until
    from orchestrator.chat.actions import new_run
    from orchestrator.execution.claims import job_lock

    orchestrator = pg_orchestrator(tmp_path, db, monkeypatch)
    await orchestrator.start()
    try:
        run = new_run(make_message("later", conversationId="c7"), orchestrator._configs.get("main"), "chat", {})
        other = PgLocks(db, holder="elsewhere:1:1", ttl_s=600)
        assert other.acquire(job_lock(run.runId))
        store = orchestrator._store
        store.create(run, None)
        sent.clear()
        for _ in range(20):  # 20 passes within well under a second
            orchestrator._executor.wake()
            await asyncio.sleep(0.01)
        tries = [text for text in sent if text.lstrip().startswith("WITH before AS (SELECT holder")]
        assert len(tries) == 1 and store.load(run.runId).state == "queued"
        other.release(job_lock(run.runId))
        await async_wait_until(lambda: store.load(run.runId).state == "done", timeout_s=10)
    finally:
        await orchestrator.stop()
