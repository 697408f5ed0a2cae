"""The run store contract on both backends (orchestrator/storage/files/runs.py RunStore,
orchestrator/storage/postgres/runs.py PgRunStore),
and the coordination locks in the database (gateway/backends/postgres/locks.py PgLocks), on the real PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from gateway.backends.postgres.locks import PgLocks
from gateway.home import Home
from gateway.telemetry.events import utc_now_iso
from orchestrator.runs.jobs import IllegalTransition
from orchestrator.runs.state import Conversation, RunState, StepState, conversation_key
from orchestrator.storage.files.runs import RunStore
from tests.fakes.orchestrator import make_message

KEY = conversation_key(make_message("x"))
MakeStore = Callable[[str], RunStore]


@pytest.fixture(params=["files", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> MakeStore:
    """A store on its own home (`host`); on postgres every host's store shares one database."""
    def make(host: str = "a") -> RunStore:
        home = Home(tmp_path / host)
        home.create()
        if request.param == "files":
            return RunStore(Home(tmp_path / "a"), fsync=False)  # the processes of one home
        from orchestrator.storage.postgres.runs import PgRunStore

        return PgRunStore(home, request.getfixturevalue("db"), fsync=True)
    return make


def _run(run_id: str = "r-1", **changes: object) -> RunState:
    message = make_message("build it")
    run = RunState(runId=run_id, workflowId="build", orchestratorId="main", message=message.model_dump(mode="json"),
                   conversation=Conversation(channel="console", conversationId="c1"),
                   steps={"Plan": StepState(), "Test": StepState()})
    return run.model_copy(update=changes)


def test_a_created_run_loads_back_equal_from_another_host(make_store: MakeStore) -> None:
    store = make_store("a")
    created = store.create(_run(input={"flag": True}), KEY)
    assert make_store("b").load("r-1") == created
    assert store.load("missing") is None and store.load("../settings") is None


def test_the_steps_keep_their_order(make_store: MakeStore) -> None:
    store = make_store("a")
    store.create(_run(steps={"Review": StepState(), "Do": StepState(), "Ask": StepState()}), KEY)
    assert list(make_store("b").load("r-1").steps) == ["Review", "Do", "Ask"]  # type: ignore[union-attr]


def test_transitions_follow_the_table(make_store: MakeStore) -> None:
    store = make_store("a")
    run = store.transition(store.create(_run(), KEY), "running")
    run = store.transition(run, "done")
    assert store.load("r-1").state == "done"  # type: ignore[union-attr]
    with pytest.raises(IllegalTransition, match="done -> running is not allowed"):
        store.transition(run, "running")


def test_a_settled_run_reads_back_lists_newest_first_and_keeps_its_events(make_store: MakeStore) -> None:
    store = make_store("a")
    older = store.create(_run("r-20231114-000000-00000001", steps={"Reply": StepState()}), None)
    run = store.create(_run("r-20231114-000000-00000002", steps={"Reply": StepState()}), KEY)
    run = store.update_step(store.transition(run, "running", save=False), "Reply", status="completed", output="hi")
    run = store.save(store.transition(run, "done", save=False).model_copy(update={"delivery": "reply"}))
    store.close_events(run.runId)
    store.settle(run)  # the file store archives it: its folder goes, one line of the day's log holds it
    other = make_store("b")
    assert other.load(run.runId) == run and other.active_for(KEY) is None
    assert [e["event"] for e in other.events(run.runId)][-2:] == ["step.completed", "run.state"]
    assert other.newest(5) == ([run, older], 2) and other.newest(1) == ([run], 2)
    assert other.newest(5, active=True) == ([older], 1)
    assert [r.runId for r in other.recent(5)] == [run.runId, older.runId]


def test_events_are_kept_per_run_in_order(make_store: MakeStore) -> None:
    store = make_store("a")
    run = store.create(_run(), KEY)
    run = store.update_step(store.transition(run, "running"), "Plan", status="running")
    store.append_event("r-1", "job.note", detail="after the save")
    store.close_events("r-1")
    events = make_store("b").events("r-1")
    assert [e["event"] for e in events] == ["run.created", "run.state", "step.running", "job.note"]
    assert events[2]["step"] == "Plan" and events[3]["detail"] == "after the save"
    assert [e["event"] for e in make_store("b").events("r-1", limit=2)] == ["step.running", "job.note"]


def test_the_active_run_is_every_hosts_and_goes_when_it_ends(make_store: MakeStore) -> None:
    store, other = make_store("a"), make_store("b")
    run = store.create(_run(), KEY)
    assert other.active_for(KEY).runId == "r-1"  # type: ignore[union-attr]
    other.transition(other.transition(run, "running"), "cancelled")
    assert store.active_for(KEY) is None
    store.create(_run("r-2"), "console/console/c2")
    active = store.active_runs()
    assert active["console/console/c2"] == "r-2"
    assert KEY not in active or not store.shared  # files: a run ended in another process leaves its entry
                                                  # until restore_active; the database drops it as it ends


def test_restore_active_points_a_conversation_at_its_newest_unfinished_run(make_store: MakeStore) -> None:
    store = make_store("a")
    store.create(_run("r-1", createdAt="2030-01-01T00:00:00.000Z"), None)
    store.create(_run("r-2", createdAt="2030-01-01T00:00:01.000Z"), None)
    ended = store.create(_run("r-3"), "console/console/gone")
    store.transition(ended, "cancelled")
    assert store.active_for(KEY) is None
    store.restore_active(store.unfinished())
    assert store.active_for(KEY).runId == "r-2"  # type: ignore[union-attr]
    assert "console/console/gone" not in store.active_runs()


def test_listings_recovery_and_retention_queries(make_store: MakeStore) -> None:
    store = make_store("a")
    store.create(_run("r-q", createdAt="2030-01-01T00:00:03.000Z"), None)
    done = store.create(_run("r-done", createdAt="2019-12-31T00:00:01.000Z"), None)  # it ends in 2020
    done = store.transition(store.transition(done, "running"), "done", job=done.job.model_copy(
        update={"finished_at": "2020-01-01T00:00:05.000Z"}))
    pushed = store.create(_run("r-pushed", createdAt="2030-01-01T00:00:02.000Z"), None)
    pushed = store.transition(store.transition(pushed, "running"), "cancelled")
    store.save(pushed.model_copy(update={"delivery": "push"}))
    assert [r.runId for r in store.all_runs()] == ["r-done", "r-pushed", "r-q"]
    assert [r.runId for r in store.unfinished()] == ["r-q"]
    assert [r.runId for r in store.needing_recovery()] == ["r-done", "r-q"]
    if store.shared:  # files order by state.json's mtime, too coarse here (tests/unit/orchestrator sets it)
        assert [r.runId for r in store.recent(2)] == ["r-pushed", "r-done"]
    assert [r.runId for r in store.finished_before(datetime.now(UTC) - timedelta(days=1))] == ["r-done"]
    store.made(store.folder("r-done") / "outputs")
    assert store.remove("r-done") and not store.remove("r-done")
    assert store.load("r-done") is None and not store.folder("r-done").exists() and store.events("r-done") == []


def test_a_cancel_request_reaches_another_host(make_store: MakeStore) -> None:
    store, other = make_store("a"), make_store("b")
    store.create(_run(), KEY)
    assert store.cancel_requests(["r-1"]) == set()
    other.request_cancel("r-1")
    assert store.cancel_requests(["r-1", "r-x"]) == {"r-1"}
    store.clear_cancel("r-1")
    assert other.cancel_requests(["r-1"]) == set()


def test_the_database_store_claims_due_runs_first_and_lists_running_ones(db: str, tmp_path: Path) -> None:
    from orchestrator.storage.postgres.runs import PgRunStore

    store = PgRunStore(Home(tmp_path / "a"), db, fsync=False)
    later = store.create(_run("r-later", createdAt="2030-01-01T00:00:01.000Z"), None)
    store.save(later.model_copy(update={"job": later.job.model_copy(update={"next_retry_at": "2999-01-01T00:00:00Z"})}))
    store.create(_run("r-due", createdAt="2030-01-01T00:00:02.000Z"), None)
    store.transition(store.create(_run("r-run"), None), "running")
    assert [run_id for run_id, _ in store.queued(10)] == ["r-due", "r-later"]
    assert store.queued(10)[1][1] == "2999-01-01T00:00:00.000Z"
    assert store.running_ids() == ["r-run"]


def test_the_claims_leave_out_runs_another_live_process_holds(db: str, tmp_path: Path) -> None:
    """A queued run reserved by another process that heartbeats (switchyard_processes) is not offered to the
    claims (its lock would only be refused); it is again once that process goes quiet, and a run this
    process holds, or one held by a holder the table does not list, is offered as before."""
    from gateway.backends.postgres.locks import PgLocks
    from gateway.disk.locks import process_instance
    from orchestrator.execution.claims import job_lock
    from orchestrator.storage.postgres.runs import PgRunStore

    store = PgRunStore(Home(tmp_path / "a"), db, fsync=False, live_sec=15)
    for n in range(4):
        store.create(_run(f"r-{n}", createdAt=f"2030-01-01T00:00:0{n}.000Z"), None)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("INSERT INTO switchyard_processes (holder, role, host, pid) VALUES ('there:1:1', 'worker', "
                     "'there', 1)")
        assert PgLocks(db, holder="there:1:1").acquire(job_lock("r-0"))  # a live worker's waiting message
        assert PgLocks(db, holder="unlisted:2:2").acquire(job_lock("r-1"))
        assert PgLocks(db, holder=process_instance()).acquire(job_lock("r-2"))  # this process's own
        assert [run_id for run_id, _ in store.queued(10)] == ["r-1", "r-2", "r-3"]
        conn.execute("UPDATE switchyard_processes SET last_seen = now() - interval '16 seconds'")  # gone quiet
        assert [run_id for run_id, _ in store.queued(10)] == ["r-0", "r-1", "r-2", "r-3"]


def test_text_the_database_cannot_read_back_never_stops_the_claims(db: str, tmp_path: Path) -> None:
    """A NUL in a run's stored JSON failed every query reading into it: the claims of every run on every
    host. A run saved now holds U+FFFD instead; one stored so before no longer stops the others."""
    from orchestrator.storage.postgres.runs import PgRunStore

    store = PgRunStore(Home(tmp_path / "a"), db, fsync=False)
    store.create(_run("r-old", createdAt="2030-01-01T00:00:01.000Z"), None)
    with psycopg.connect(db, autocommit=True) as conn:  # as an earlier version stored it
        conn.execute("UPDATE switchyard_runs SET data = replace(data::text, 'build it', 'build \\u0000 it')::json")
    store.create(_run("r-new", createdAt="2030-01-01T00:00:02.000Z", input={"out": "a\x00b\ud800"}), None)
    assert [run_id for run_id, _ in store.queued(10)] == ["r-old", "r-new"]
    assert store.load("r-new").input == {"out": "a\ufffdb\ufffd"}  # type: ignore[union-attr]
    assert store.load("r-old").message["message"] == "build \x00 it"  # type: ignore[union-attr]


def test_a_stored_run_that_is_not_a_run_is_failed_and_the_others_go_on(db: str, tmp_path: Path) -> None:
    """As the file store answers for a state.json it cannot read: none, logged; and it is marked
    failed_final, so the oldest queued run no longer stops every claim (before: each claim pass raised)."""
    from orchestrator.storage.postgres.runs import PgRunStore

    store = PgRunStore(Home(tmp_path / "a"), db, fsync=False)
    store.create(_run("r-bad", createdAt="2030-01-01T00:00:01.000Z"), KEY)
    store.create(_run("r-good", createdAt="2030-01-01T00:00:02.000Z"), None)
    with psycopg.connect(db, autocommit=True) as conn:  # written by another version, or by hand
        conn.execute("UPDATE switchyard_runs SET data = '{\"runId\": \"r-bad\", \"state\": \"paused\"}' "
                     "WHERE run_id = 'r-bad'")
    assert store.active_for(KEY) is None and store.load("r-bad") is None
    assert [run_id for run_id, _ in store.queued(10)] == ["r-good"]
    assert [run.runId for run in store.all_runs()] == ["r-good"]
    with psycopg.connect(db) as conn:
        assert conn.execute("SELECT state, data->>'state' FROM switchyard_runs WHERE run_id = 'r-bad'").fetchone() \
            == ("failed_final", "paused")


def test_an_undurable_save_is_made_durable_by_sync(db: str, tmp_path: Path) -> None:
    from orchestrator.storage.postgres.runs import PgRunStore

    store = PgRunStore(Home(tmp_path / "a"), db, fsync=True)
    store.create(_run(), None, durable=False)
    assert store._unsynced == {"r-1"}
    store.sync("r-1")
    assert store._unsynced == set()


# --- PgLocks ------------------------------------------------------------------------------------

def test_a_held_lock_is_refused_to_another_holder(db: str) -> None:
    first, second = PgLocks(db, holder="a", ttl_s=60), PgLocks(db, holder="b", ttl_s=60)
    assert first.acquire("job:x") and first.acquire("job:x")
    assert not second.acquire("job:x") and first.owner("job:x") == "a"
    second.release("job:x")  # not its lock: nothing happens
    assert not second.acquire("job:x")
    first.release("job:x")
    assert second.acquire("job:x") and second.reclaimed == 0


def test_an_expired_lock_is_taken_over_by_the_database_clock(db: str) -> None:
    assert PgLocks(db, holder="a", ttl_s=0.2).acquire("job:x")
    taker = PgLocks(db, holder="b", ttl_s=60)
    assert not taker.acquire("job:x")
    with psycopg.connect(db) as conn:  # the expiry is the database's: move it, not a host's clock
        conn.execute("UPDATE switchyard_locks SET expires_at = now() - interval '1 second'")
    assert taker.acquire("job:x") and taker.reclaimed == 1 and taker.owner("job:x") == "b"


def test_a_lock_of_a_process_gone_from_this_host_is_taken_over_at_once(db: str) -> None:
    """A `switchyard run` killed and started again on its host resumes its runs without waiting out the
    TTL (as with lock files); a holder on another host, or alive here, keeps its lock until it expires."""
    import os
    import socket
    import subprocess
    import sys

    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                           check=True)
    gone = f"{socket.gethostname()}:{int(ended.stdout)}:1"
    elsewhere = f"another-host-{socket.gethostname()}:{int(ended.stdout)}:1"
    alive = f"{socket.gethostname()}:{os.getpid()}:1"
    for holder, resource in ((gone, "job:gone"), (elsewhere, "job:elsewhere"), (alive, "job:alive")):
        assert PgLocks(db, holder=holder, ttl_s=600).acquire(resource)
    taker = PgLocks(db, holder="b", ttl_s=60)
    assert taker.acquire("job:gone") and taker.owner("job:gone") == "b" and taker.reclaimed == 1
    assert not taker.acquire("job:elsewhere") and not taker.acquire("job:alive")


def test_renew_moves_the_expiry_and_clean_expired_frees_only_stale_locks(db: str) -> None:
    live, stale = PgLocks(db, holder="a", ttl_s=1), PgLocks(db, holder="b", ttl_s=600)
    live.acquire("live")
    stale.acquire("stale")

    def expiry(resource: str) -> datetime:
        with psycopg.connect(db) as conn:
            row = conn.execute("SELECT expires_at FROM switchyard_locks WHERE resource = %s", (resource,)).fetchone()
        assert row is not None
        return row[0]  # type: ignore[no-any-return]

    before = expiry("live")
    live.ttl_s = 600
    live.renew(["live", "stale"])  # only its own
    assert expiry("live") > before
    with psycopg.connect(db) as conn:
        conn.execute("UPDATE switchyard_locks SET expires_at = now() - interval '1 second' WHERE resource = 'stale'")
    assert PgLocks(db, holder="c").clean_expired() == ["stale"]
    assert live.owner("live") == "a"


def test_retention_lists_an_old_run_whose_json_holds_a_nul(db: str, tmp_path: Path) -> None:
    """The retention listing read the runs' JSON in the database (their job's finished_at): one old row
    holding a NUL (`\\u0000`, stored so by an earlier version) failed it for every run, so no finished
    run was ever removed again. It reads columns only now; both old runs go, the new one stays."""
    from orchestrator.execution.coordination import Coordination
    from orchestrator.runs.retention import prune_runs
    from orchestrator.storage.postgres.runs import PgRunStore

    home = Home(tmp_path / "a")
    store = PgRunStore(home, db, fsync=False)
    ended = {"finished_at": "2020-01-01T00:00:05.000Z"}
    for run_id, created in (("r-nul", "2020-01-01T00:00:01.000Z"), ("r-old", "2020-01-01T00:00:02.000Z"),
                            ("r-new", utc_now_iso())):
        run = store.create(_run(run_id, createdAt=created), None)
        store.transition(store.transition(run, "running"), "done",
                         job=run.job.model_copy(update=ended if run_id != "r-new" else {}))
    with psycopg.connect(db, autocommit=True) as conn:  # as an earlier version stored it, a while ago
        conn.execute("UPDATE switchyard_runs SET data = replace(data::text, 'build it', 'build \\u0000 it')::json "
                     "WHERE run_id = 'r-nul'")
    assert sorted(prune_runs(home, store, Coordination(home), 30)) == ["r-nul", "r-old"]
    assert [run.runId for run in store.all_runs()] == ["r-new"]
