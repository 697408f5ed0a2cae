"""orchestrator/storage/files/runs.py: state.json, the transition table, run ids, snapshots, active runs."""

from __future__ import annotations

import json

import pytest

from gateway.home import Home
from orchestrator.runs.jobs import TRANSITIONS, IllegalTransition
from orchestrator.runs.state import Conversation, RunState, StepState, conversation_key, run_id_for
from orchestrator.runs.status import snapshot
from orchestrator.storage.files.runs import RunStore
from tests.fakes.orchestrator import make_message


def _run(run_id: str = "r-1", **changes: object) -> RunState:
    message = make_message("build it")
    run = RunState(runId=run_id, workflowId="build", orchestratorId="main",
                   message=message.model_dump(mode="json"),
                   conversation=Conversation(channel="console", conversationId="c1"),
                   steps={"Plan": StepState(), "Test": StepState(), "Deploy": StepState()})
    return run.model_copy(update=changes)


def test_state_json_shape(home: Home) -> None:
    store = RunStore(home, fsync=False)
    store.create(_run(), "console/console/c1")
    data = json.loads((home.runs / "r-1" / "state.json").read_text())
    assert {"runId", "workflowId", "state", "currentStep", "createdAt", "updatedAt", "input", "message",
            "conversation", "steps"} <= set(data)
    assert data["state"] == "queued"
    assert data["conversation"] == {"channel": "console", "channelProfileId": None, "conversationId": "c1",
                                    "senderId": None}
    assert set(data["steps"]["Plan"]) >= {"status", "startedAt", "finishedAt", "exitCode", "output", "error"}
    assert store.load("r-1") == RunState.model_validate(data)


def test_transitions_follow_the_table(home: Home) -> None:
    store = RunStore(home, fsync=False)
    run = store.create(_run(), "k")
    run = store.transition(run, "running")
    run = store.transition(run, "done")
    assert store.load("r-1").state == "done"  # type: ignore[union-attr]
    with pytest.raises(IllegalTransition, match="done -> running is not allowed"):
        store.transition(run, "running")


@pytest.mark.parametrize("state", ["done", "failed_final", "cancelled"])
def test_final_states_lead_nowhere(state: str) -> None:
    assert TRANSITIONS[state] == frozenset()


def test_queued_cannot_jump_to_done(home: Home) -> None:
    store = RunStore(home, fsync=False)
    with pytest.raises(IllegalTransition):
        store.transition(store.create(_run(), "k"), "done")


def test_run_id_is_derived_from_the_message() -> None:
    message = make_message("hi", timestamp=1_700_000_000_000)
    run_id = run_id_for(message)
    assert run_id.startswith("r-20231114-221320-") and len(run_id) == len("r-20231114-221320-") + 8
    assert run_id_for(message.model_copy()) == run_id
    assert run_id_for(message.model_copy(update={"messageId": "other"})) != run_id


def test_active_run_is_set_and_cleared_when_the_run_ends(home: Home) -> None:
    store = RunStore(home, fsync=False)
    key = conversation_key(make_message("x"))
    run = store.create(_run(), key)
    assert store.active_for(key).runId == "r-1"  # type: ignore[union-attr]
    assert json.loads(store.active_file.read_text()) == {key: "r-1"}
    store.transition(store.transition(store.transition(run, "running"), "failed", error="boom"), "failed_final")
    assert store.active_for(key) is None
    other = conversation_key(make_message("y", conversationId="c2"))
    store.create(_run("r-2"), other)  # the next write drops the ended run's entry
    assert json.loads(store.active_file.read_text()) == {other: "r-2"}


def test_the_active_index_lost_in_a_power_cut_is_rebuilt_from_the_runs(home: Home) -> None:
    store = RunStore(home, fsync=False)
    key = conversation_key(make_message("x"))
    store.create(_run(), key)
    store.active_file.write_text("")  # what an unsynced file can be after a power cut
    assert store.active_for(key) is None
    store.restore_active(store.unfinished())
    assert store.active_for(key).runId == "r-1"  # type: ignore[union-attr]


def test_the_entries_of_ended_runs_are_dropped_at_start(home: Home) -> None:
    store = RunStore(home, fsync=False)
    key = conversation_key(make_message("x"))
    run = store.create(_run(), key)
    RunStore(home, fsync=False).transition(run, "cancelled")  # ended in another process (or before a crash)
    assert json.loads(store.active_file.read_text()) == {key: "r-1"}
    store.restore_active(store.unfinished())
    assert json.loads(store.active_file.read_text()) == {}


def test_snapshot_names_run_workflow_state_and_each_step() -> None:
    run = _run(state="running", currentStep="Test", steps={
        "Plan": StepState(status="completed"), "Test": StepState(status="running"), "Deploy": StepState()})
    assert snapshot(run).startswith("Run r-1 (workflow build): running, step 2/3 Test, elapsed ")
    assert snapshot(run).endswith("\n  ✓ Plan\n  ▶ Test\n  · Deploy")


def test_snapshot_of_a_failed_step_shows_the_error() -> None:
    run = _run(state="failed_final", currentStep="Plan", steps={"Plan": StepState(status="failed", error="exit 2")})
    assert snapshot(run).startswith("Run r-1 (workflow build): failed_final, elapsed ")
    assert snapshot(run).endswith("\n  ✗ Plan: exit 2")


def test_unsafe_run_ids_are_not_loaded(home: Home) -> None:
    assert RunStore(home).load("../settings") is None


def test_events_are_appended_per_run(home: Home) -> None:
    store = RunStore(home, fsync=False)
    run = store.create(_run(), "k")
    store.update_step(store.transition(run, "running"), "Plan", status="running")
    lines = (home.runs / "r-1" / "events.jsonl").read_text().splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["run.created", "run.state", "step.running"]


def test_text_no_store_holds_is_stored_as_replacement_characters(home: Home) -> None:
    """A step's output or an event's field holding a NUL or a lone surrogate (an agent's answer can) is
    written as U+FFFD, as the database store writes it; before, a lone surrogate failed the save."""
    store = RunStore(home, fsync=False)
    run = store.create(_run(), "k")
    run = store.update_step(run, "Plan", status="completed", output="a\x00b\ud800c", error="e\udfff")
    store.append_event(run.runId, "step.note", note="n\x00\ud800")
    assert run.steps["Plan"].output == "a\ufffdb\ufffdc"  # the run returned is what was written
    loaded = store.load("r-1")
    assert loaded is not None and loaded.steps["Plan"].output == "a\ufffdb\ufffdc"
    assert loaded.steps["Plan"].error == "e\ufffd"
    assert "\\u0000" not in (home.runs / "r-1" / "state.json").read_text()
    assert store.events("r-1")[-1]["note"] == "n\ufffd\ufffd"
    assert [event["event"] for event in store.events("r-1")] == ["run.created", "step.completed", "step.note"]


def test_a_state_that_is_not_a_run_is_kept_and_ended_by_a_stand_in_that_tells_its_sender(home: Home) -> None:
    store = RunStore(home, fsync=False)
    store.create(_run(), "k")
    path = home.runs / "r-1" / "state.json"
    broken = path.read_bytes().replace(b'"state": "queued"', b'"state": "paused"')  # another version, a hand edit
    path.write_bytes(broken)
    assert store.load("r-1") is None and [run_id for run_id, _ in store.unreadable()] == ["r-1"]
    stand_in = store.quarantine("r-1", "its state.json is not a run")
    assert stand_in is not None and store.load("r-1") == stand_in and store.unreadable() == []
    assert (stand_in.state, stand_in.delivery, stand_in.conversation.conversationId) == ("failed_final", None, "c1")
    assert stand_in.payload().message == "build it"  # so its sender can be told
    assert stand_in.error is not None and stand_in.error.startswith("its state.json is not a run (its bytes are kept")
    [kept] = (home.runs / "r-1").glob("state.json.unreadable-*")
    assert kept.read_bytes() == broken
    path.write_bytes(b"\xff not even JSON")
    assert store.quarantine("r-1", "unreadable").delivery == "push"  # type: ignore[union-attr]  # nobody to tell
