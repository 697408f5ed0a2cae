"""orchestrator/runs/retention.py: finished runs past runs_retention_days go with their coordination records."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gateway.home import Home
from orchestrator.execution.coordination import Coordination
from orchestrator.runs.jobs import JobState
from orchestrator.runs.retention import REMOVING_PREFIX, prune_runs
from orchestrator.runs.state import Conversation, RunState, StepState
from orchestrator.storage.files.runs import RunStore
from tests.fakes.orchestrator import make_message

LATER = datetime.now(UTC) + timedelta(days=31)  # "now" a month on: runs ended today are 31 days old


def _store_run(store: RunStore, run_id: str, path: tuple[JobState, ...], key: str | None = None,
               *, active: bool = True) -> RunState:
    run = RunState(runId=run_id, workflowId="w", orchestratorId="main",
                   message=make_message("hi").model_dump(mode="json"),
                   conversation=Conversation(channel="console", conversationId=run_id),
                   steps={"Plan": StepState()})
    run = store.create(run, (key or f"console/console/{run_id}") if active else None)
    for state in path:
        run = store.transition(run, state)
    return run


def _with_records(coordination: Coordination, run_id: str) -> None:
    coordination.checkpoint(run_id, {"metadata": {"task_id": run_id}})
    coordination.handoff({"task_id": run_id, "from_step": "Plan"})
    archived = coordination.root / "archive" / "handoffs" / f"{run_id}-Old.json"
    archived.parent.mkdir(parents=True, exist_ok=True)
    archived.write_text("{}")
    coordination.complete({"task_id": run_id, "status": "complete"})


@pytest.fixture
def store(home: Home) -> RunStore:
    return RunStore(home, fsync=False)


def test_only_finished_runs_past_the_retention_are_removed_with_their_records(home: Home, store: RunStore) -> None:
    coordination = Coordination(home)
    finished = {"done": ("running", "done"), "final": ("running", "failed", "failed_final"),
                "cancelled": ("cancelled",)}
    unfinished = {"queued": (), "running": ("running",), "waiting": ("running", "waiting_input"),
                  "retrying": ("running", "failed")}
    for run_id, path in {**finished, **unfinished}.items():
        _store_run(store, run_id, path, active=False)  # the state alone must protect an unfinished run
        _with_records(coordination, run_id)

    removed = prune_runs(home, store, coordination, 30, now=LATER)

    assert sorted(removed) == sorted(finished)
    assert sorted(run.runId for run in store.all_runs()) == sorted(unfinished)
    for run_id in finished:
        assert not store.folder(run_id).exists()
        assert not coordination.checkpoint_dir(run_id).exists()
        assert not list((coordination.root / "handoffs").glob(f"{run_id}-*"))
        assert not list((coordination.root / "archive" / "handoffs").glob(f"{run_id}-*"))
    for run_id in unfinished:
        assert (store.folder(run_id) / "state.json").exists()
        assert coordination.checkpoint_dir(run_id).exists()
        assert list((coordination.root / "handoffs").glob(f"{run_id}-*"))
    # completed.jsonl is append-only and kept indefinitely (spec 001)
    assert {r["task_id"] for r in coordination.completed()} == set(finished) | set(unfinished)


def test_recent_runs_stay_and_zero_keeps_runs_forever(home: Home, store: RunStore) -> None:
    coordination = Coordination(home)
    _store_run(store, "done", ("running", "done"))
    assert prune_runs(home, store, coordination, 30) == []  # ended just now
    assert prune_runs(home, store, coordination, 0, now=LATER + timedelta(days=3650)) == []
    assert prune_runs(home, store, coordination, 31.5, now=LATER) == []
    assert prune_runs(home, store, coordination, 30.5, now=LATER) == ["done"]


def test_a_finished_run_a_stale_active_entry_still_names_is_removed(home: Home, store: RunStore) -> None:
    coordination = Coordination(home)
    _store_run(store, "done", ("running", "done"))  # its active.json entry stays until the index's next write
    assert store.active_runs() == {"console/console/done": "done"}
    assert prune_runs(home, store, coordination, 30, now=LATER) == ["done"]
    assert store.active_for("console/console/done") is None


def test_an_unreadable_run_folder_is_left_alone_and_a_half_removed_one_is_finished(home: Home,
                                                                                  store: RunStore) -> None:
    coordination = Coordination(home)
    broken = home.runs / "r-broken"
    broken.mkdir(parents=True)
    (broken / "state.json").write_text("{not json")
    half = home.runs / f"{REMOVING_PREFIX}r-old"
    (half / "work").mkdir(parents=True)
    (half / "work" / "out.txt").write_text("x")
    assert prune_runs(home, store, coordination, 30, now=LATER) == []
    assert (broken / "state.json").exists()
    assert not half.exists()
