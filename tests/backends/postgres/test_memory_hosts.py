"""Conversation memory on the postgres backend (orchestrator/storage/postgres/sessions.py): the session map and the
recent exchanges are the file store's contract on a table, so a conversation whose first message was
answered on host A continues on host B (B resumes A's CLI session, B's selector sees A's exchange), and
`hold` keeps one session's calls one at a time across processes, also when a holder is killed."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from gateway.home import Home
from gateway.settings import ProviderSettings
from gateway.telemetry.events import EventLog
from gateway.testing import async_wait_until, wait_until
from orchestrator.agents.clis.runner import AgentCliRunner
from orchestrator.agents.providers import ProviderRunner
from orchestrator.agents.sessions import (
    HISTORY_EXCHANGES,
    HISTORY_TEXT_CHARS,
    MAX_TURNS,
    ConversationHistory,
    SessionStore,
)
from orchestrator.chat.selector import Selector
from orchestrator.config.loading import LoadedConfig
from orchestrator.config.models import OrchestratorConfig
from orchestrator.storage.postgres.sessions import PgRecords, PgSessionStore
from tests.backends.postgres.test_workers import PgProcess
from tests.fakes.clis import FakeClis
from tests.fakes.stores import file_history, file_sessions
from tests.faults.harness import message

SCOPE = "conv:console/console/c1"


@pytest.fixture(params=["file", "database"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], tuple[SessionStore, ConversationHistory]]:
    """Makes (sessions, history) handles that share their state, as two processes on one home or two
    hosts on one database would."""
    if request.param == "file":
        home = Home(tmp_path / "home")
        home.create()
        return lambda: (file_sessions(home), file_history(home))
    dsn = request.getfixturevalue("db")
    return lambda: (PgSessionStore(dsn), ConversationHistory(PgRecords(dsn, "history")))


# --- the store contract, on both stores ---------------------------------------------------------------


def test_an_answer_holding_a_nul_is_remembered_and_the_conversation_goes_on(
        stores: Callable[[], tuple[SessionStore, ConversationHistory]]) -> None:
    """A provider's NUL is kept in a file and stored as U+FFFD in the database (it was refused)."""
    _, history = stores()
    history.add(SCOPE, "hi", "a\x00b")
    history.add(SCOPE, "next", "fine")
    assert [e["assistant"] for e in stores()[1].recent(SCOPE)] in (
        [["a\x00b", "fine"], ["a\ufffdb", "fine"]])


def test_a_session_with_our_own_id_is_continued_and_started_afresh_when_forgotten(
        stores: Callable[[], tuple[SessionStore, ConversationHistory]]) -> None:
    sessions, _ = stores()
    first = sessions.session("claude", SCOPE, assigns_ids=True)
    assert first.id and not first.resume
    assert sessions.session("claude", SCOPE, assigns_ids=True) == first, "the same id until it is used"
    sessions.save("claude", SCOPE, first.id)
    other_host, _ = stores()
    again = other_host.session("claude", SCOPE, assigns_ids=True)
    assert (again.id, again.resume) == (first.id, True)
    assert other_host.session("claude", "conv:console/console/c2", assigns_ids=True).id != first.id
    assert other_host.session("gemini", SCOPE, assigns_ids=True).id != first.id
    fresh = other_host.forget("claude", SCOPE, assigns_ids=True)
    assert fresh.id and fresh.id != first.id and not fresh.resume
    assert sessions.session("claude", SCOPE, assigns_ids=True) == fresh


def test_a_cli_that_names_its_own_session_is_resumed_by_that_name(
        stores: Callable[[], tuple[SessionStore, ConversationHistory]]) -> None:
    sessions, _ = stores()
    assert sessions.session("codex", SCOPE, assigns_ids=False).id is None
    sessions.save("codex", SCOPE, "thread-7")
    resumed = stores()[0].session("codex", SCOPE, assigns_ids=False)
    assert (resumed.id, resumed.resume) == ("thread-7", True)


def test_a_cli_without_sessions_keeps_its_last_turns(
        stores: Callable[[], tuple[SessionStore, ConversationHistory]]) -> None:
    sessions, _ = stores()
    for n in range(MAX_TURNS + 3):
        sessions.save("ollama", SCOPE, None, {"prompt": f"q{n}", "answer": f"a{n}"})
    session = stores()[0].session("ollama", SCOPE, assigns_ids=False)
    assert session.id is None and not session.resume
    assert [t["prompt"] for t in session.turns] == [f"q{n}" for n in range(3, MAX_TURNS + 3)]


def test_history_keeps_the_last_exchanges_clipped_and_capped(
        stores: Callable[[], tuple[SessionStore, ConversationHistory]]) -> None:
    _, history = stores()
    assert history.recent(SCOPE) == []
    for n in range(HISTORY_EXCHANGES + 2):
        history.add(SCOPE, f"question {n}", f"answer {n}")
    recent = stores()[1].recent(SCOPE)
    assert [e["user"] for e in recent] == [f"question {n}" for n in range(2, HISTORY_EXCHANGES + 2)]
    history.add(SCOPE, "x" * 5000, "y" * 5000)
    clipped = history.recent(SCOPE)
    assert clipped[-1]["user"] == "x" * HISTORY_TEXT_CHARS + "…"
    assert len(json.dumps(clipped, ensure_ascii=False).encode()) <= 4096 + 2 * len(clipped)
    assert history.recent("conv:console/console/other") == []


def test_hosts_changing_one_record_at_once_all_keep_their_change(db: str) -> None:
    """Each change reads and writes the record with the row locked: no change is lost (a history with two
    hosts adding exchanges, a session saved while another host forgets it)."""

    def count(record: dict[str, Any]) -> dict[str, Any]:
        return {**record, "n": record.get("n", 0) + 1}

    def host() -> None:
        records = PgRecords(db, "history")
        for _ in range(10):
            records.update((SCOPE,), count)

    threads = [threading.Thread(target=host) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert PgRecords(db, "history").read((SCOPE,)) == {"n": 80}


def test_memory_that_cannot_be_stored_does_not_fail_a_message_whose_action_already_ran(
        pg_dsn: str, home: Home, caplog: pytest.LogCaptureFixture) -> None:
    """A record is stored after the action or the agent call; a database error there is logged: raising
    would retry the message and run its action (start a workflow, call the agent) a second time."""
    no_tables = pg_dsn  # a schema without the migrations: every statement fails
    runner = ProviderRunner(home, {"picker": ProviderSettings(type="codex")}, {}, sessions=file_sessions(home))
    events = EventLog(home.events_file)
    try:
        selector = Selector(home, runner, events, ConversationHistory(PgRecords(no_tables, "history")))
        loaded = LoadedConfig("main", home.root, OrchestratorConfig.model_validate(
            {"selector": {"provider": "picker"}, "workflows": {}}))
        selector.remember(message(1, "c1", "hello"), loaded, "hi")
        assert "could not keep the exchange" in caplog.text
        AgentCliRunner(PgSessionStore(no_tables), events).save_session("claude", SCOPE, "id-1", None)
        assert "could not keep the session" in caplog.text
    finally:
        events.close()


# --- hold() across processes --------------------------------------------------------------------------

HOLDER = textwrap.dedent("""
    import asyncio, sys
    from orchestrator.storage.postgres.sessions import PgSessionStore

    async def main():
        async with PgSessionStore(sys.argv[1]).hold("claude", sys.argv[2]):
            print("held", flush=True)
            await asyncio.Event().wait()

    asyncio.run(main())
""")


def _holder(dsn: str, scope: str) -> subprocess.Popen[str]:
    """Another process holding (claude, scope) until it is killed; returns once it holds it."""
    process = subprocess.Popen([sys.executable, "-c", HOLDER, dsn, scope], stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])})
    assert process.stdout is not None and process.stdout.readline().strip() == "held"
    return process


def _advisory_requests(dsn: str, scope: str = SCOPE) -> list[bool]:
    """`granted` of each request for the advisory lock of (claude, scope) (other tests on the server
    take advisory locks of their own)."""
    with psycopg.connect(dsn) as conn:
        return [row[0] for row in conn.execute(
            "WITH k AS (SELECT ('x' || left(md5(current_schema() || chr(31) || 'claude' || chr(31) || %s), 16))"
            "::bit(64)::bigint AS key) "
            "SELECT granted FROM pg_locks, k WHERE locktype = 'advisory' AND objsubid = 1 "
            "AND classid::bigint = (key >> 32) & 4294967295 AND objid::bigint = key & 4294967295", (scope,))]


async def _within(seconds: float, condition: Callable[[], bool]) -> bool:
    """Whether `condition` became true within `seconds` (polled)."""
    try:
        await async_wait_until(condition, seconds, 0.05)
    except AssertionError:
        return False
    return True


async def _entered(store: SessionStore, scope: str, within_s: float) -> bool:
    """Whether hold(claude, scope) was entered within `within_s` (released at once)."""

    async def enter() -> None:
        async with store.hold("claude", scope):
            pass

    try:
        await asyncio.wait_for(enter(), within_s)
    except TimeoutError:
        return False
    return True


def test_a_session_held_by_another_process_waits_until_that_process_is_killed(db: str) -> None:
    holder = _holder(db, SCOPE)
    try:
        store = PgSessionStore(db)

        async def scenario() -> None:
            assert not await _entered(store, SCOPE, 1.0), "two processes held one session at once"
            assert await _entered(store, "conv:console/console/c2", 5.0), "another session is not held up"
            waiting = [asyncio.create_task(_entered(store, SCOPE, 60.0)) for _ in range(3)]
            await async_wait_until(lambda: _advisory_requests(db).count(False) >= 1, 10)
            assert not await _within(1.0, lambda: _advisory_requests(db).count(False) > 1), \
                "one connection per session and process: the others wait in process"
            assert sorted(_advisory_requests(db)) == [False, True]
            holder.send_signal(signal.SIGKILL)
            assert await asyncio.gather(*waiting) == [True, True, True], "a killed holder frees the session"

        asyncio.run(scenario())
    finally:
        holder.kill()
        holder.wait(10)
        assert holder.stdout is not None
        holder.stdout.close()
    assert _advisory_requests(db) == [] and _advisory_requests(db, "conv:console/console/c2") == [], \
        "every lock is released after the calls"


# --- two hosts, one conversation, through `switchyard run` ---------------------------------------------

DECISION = json.dumps({"action": "workflow_start", "workflowId": "chat", "input": {}})
ORCHESTRATOR: dict[str, Any] = {
    "selector": {"provider": "picker"}, "diagnostics": {"provider": "rules"}, "reply_within_sec": 60,
    "rules": {"default_workflow": "chat"},
    "agents": {"helper": {"provider": "helper", "prompt": "{{message}}"}},
    "workflows": {"chat": {"description": "Talk with the helper agent", "steps": [{"id": "Reply", "agent": "helper"}]}},
}


def _host(root: Path, dsn: str, agent: str, fake_state: Path, workspace: Path | None = None) -> PgProcess:
    """`switchyard run` on its own home; `workspace`: the orchestrator's folder, at one path on every host."""
    selector = "claude" if agent == "codex" else "codex"
    host = PgProcess(root, dsn, root.parent / f"{root.name}-unused.jsonl", role="run")
    host.env.update(FAKE_CLI_STATE=str(fake_state), TEST_HOST=root.name)
    shared = {"orchestrators": {"main": {"workspace": str(workspace)}}} if workspace else {}
    host.configure(queue={"backend": "postgres", "fsync": False, "lease_sec": 2},
                   providers={"picker": {"type": selector}, "helper": {"type": agent}},
                   orchestrator=ORCHESTRATOR, **shared)
    if workspace is not None:
        workspace.mkdir(exist_ok=True)
        (workspace / "orchestrator.yaml").write_text(json.dumps(ORCHESTRATOR))
    return host


def _replies(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute("SELECT payload->>'message' FROM switchyard_outbox ORDER BY id")]


def _answer_on(host: PgProcess, dsn: str, text: str, seq: int) -> None:
    """Starts `switchyard run` on the host, has it answer one message of conversation c1, stops it."""
    host.start()
    before = len(_replies(dsn))
    host.drop(message(seq, "c1", text))
    wait_until(lambda: len(_replies(dsn)) > before, 60)
    assert host.stop() == 0


def _calls(state: Path, cli: str) -> list[dict[str, Any]]:
    log = state / "calls.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.exists() else []
    return [r for r in records if r["cli"] == cli]


def _after(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def _selector_requests(home: Home) -> list[dict[str, Any]]:
    return [json.loads(p.read_bytes()) for p in sorted(home.select_incoming.glob("*.json"))]


def _continued(agent: str, first: dict[str, Any], later: dict[str, Any]) -> tuple[str, str]:
    """(the session `first` started, the one `later` resumed)."""
    if agent == "codex":
        assert "resume" not in first["argv"]
        return first["thread_id"], _after(later["argv"], "resume")
    return _after(first["argv"], "--session-id"), _after(later["argv"], "--resume")


@pytest.mark.e2e
@pytest.mark.timeout(180)
@pytest.mark.parametrize("agent", ["claude", "codex", "gemini"])
def test_host_b_resumes_the_cli_session_host_a_started_and_its_selector_sees_a_s_exchange(
        db: str, tmp_path: Path, fake_clis: FakeClis, agent: str) -> None:
    """The CLI's own session store is shared here (one FAKE_CLI_STATE) and the orchestrator's folder has
    one path on both hosts (claude and gemini keep sessions per working directory): B continues A's session."""
    selector = "claude" if agent == "codex" else "codex"
    fake_clis.answer(selector, DECISION)
    hosts = [_host(tmp_path / name, db, agent, fake_clis.state, tmp_path / "workspace") for name in ("a", "b")]
    _answer_on(hosts[0], db, "my name is Ada", 1)
    _answer_on(hosts[1], db, "what is my name?", 2)
    first, second = _calls(fake_clis.state, agent)
    assert (first["env"]["TEST_HOST"], second["env"]["TEST_HOST"]) == ("a", "b")
    started, resumed = _continued(agent, first, second)
    assert resumed == started, "host B resumed host A's session"
    assert _replies(db)[-1] == "echo: what is my name?"
    [on_b] = _selector_requests(hosts[1].home)
    assert [e["user"] for e in on_b["recentExchanges"]] == ["my name is Ada"], "B's selector saw A's exchange"
    assert "my name is Ada" in _calls(fake_clis.state, selector)[1]["stdin"]
    assert not any((host.home.root / "sessions").exists() for host in hosts), "nothing kept in the homes"


@pytest.mark.e2e
@pytest.mark.timeout(180)
def test_a_cli_without_sessions_gets_host_a_s_turns_in_its_prompt_on_host_b(
        db: str, tmp_path: Path, fake_clis: FakeClis) -> None:
    """ollama keeps no session: its last turns are part of the record, so B's prompt carries A's turn
    even with nothing shared but the database (each host has its own CLI state)."""
    fake_clis.answer("codex", DECISION)
    host_a = _host(tmp_path / "a", db, "ollama", tmp_path / "cli-a")
    host_b = _host(tmp_path / "b", db, "ollama", tmp_path / "cli-b")
    _answer_on(host_a, db, "my name is Ada", 1)
    _answer_on(host_b, db, "what is my name?", 2)
    [on_b] = _calls(tmp_path / "cli-b", "ollama")
    assert "my name is Ada" in on_b["stdin"] and "what is my name?" in on_b["stdin"]


@pytest.mark.e2e
@pytest.mark.timeout(180)
def test_without_the_cli_s_own_session_store_host_b_starts_the_session_afresh_and_says_so(
        db: str, tmp_path: Path, fake_clis: FakeClis) -> None:
    """claude keeps its sessions on the machine that ran it: B is told A's session id, claude on B does
    not know it, and B starts a new session (event provider.session_reset) instead of failing."""
    fake_clis.answer("codex", DECISION)
    host_a = _host(tmp_path / "a", db, "claude", tmp_path / "cli-a")
    host_b = _host(tmp_path / "b", db, "claude", tmp_path / "cli-b")
    _answer_on(host_a, db, "my name is Ada", 1)
    _answer_on(host_b, db, "what is my name?", 2)
    [first] = _calls(tmp_path / "cli-a", "claude")
    [fresh] = _calls(tmp_path / "cli-b", "claude")  # the call that tried to resume failed before its log
    assert _after(fresh["argv"], "--session-id") != _after(first["argv"], "--session-id")
    assert host_b.count("provider.session_reset") == 1
    assert _replies(db)[-1] == "echo: what is my name?"
