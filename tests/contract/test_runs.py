"""The run store (orchestrator.storage.stores.RunRecords) on every backend: a run saved on one handle loads back
equal on another, listed newest first (`runs`, `status`, the dashboard), each conversation with its own
active run, events kept in order, a removed run gone from everything."""

from __future__ import annotations

import time

from gateway.telemetry.events import utc_now_iso
from gateway.testing import wait_until
from orchestrator.runs.jobs import JobInfo
from orchestrator.runs.state import Conversation, RunState, StepState
from tests.contract.backends import Backend

TICK_S = 0.02  # a file's mtime and a run's updatedAt (milliseconds) tell apart writes this far apart


def run(run_id: str, conversation: str = "c1") -> RunState:
    message = {"channel": "console", "message": "build it", "timestamp": 1, "messageId": run_id,
               "senderId": "u1", "conversationId": conversation}
    return RunState(runId=run_id, workflowId="build", orchestratorId="main", message=message,
                    conversation=Conversation(channel="console", conversationId=conversation),
                    steps={"Plan": StepState(), "Do": StepState()})


def next_tick() -> None:
    """Waits until a write now is later, by every store's clock, than the last one."""
    start = time.monotonic()
    wait_until(lambda: time.monotonic() - start >= TICK_S, interval_s=TICK_S / 4)


def test_a_saved_run_loads_back_equal_on_another_handle(backend: Backend) -> None:
    first, second = backend.runs(), backend.runs()
    created = first.create(run("r-1").model_copy(update={"input": {"flag": True, "text": "caf\u00e9"}}),
                           "console/console/c1")
    assert second.load("r-1") == created
    changed = first.save(created.model_copy(update={"state": "running", "currentStep": "Plan"}))
    assert second.load("r-1") == changed and changed.state == "running"
    assert second.load("r-missing") is None


def test_runs_are_listed_newest_changed_first_and_all_oldest_created_first(backend: Backend) -> None:
    store = backend.runs()
    for run_id in ("r-1", "r-2", "r-3"):
        store.create(run(run_id, conversation=run_id), None)
        next_tick()
    store.save(store.load("r-1").model_copy(update={"state": "running"}))  # type: ignore[union-attr]
    assert [found.runId for found in backend.runs().recent(2)] == ["r-1", "r-3"]
    assert [found.runId for found in backend.runs().all_runs()] == ["r-1", "r-2", "r-3"]


def test_each_conversation_has_its_own_active_run_until_it_ends(backend: Backend) -> None:
    store, other = backend.runs(), backend.runs()
    store.create(run("r-1", "c1"), "console/console/c1")
    store.create(run("r-2", "c2"), "console/console/c2")
    assert other.active_for("console/console/c1").runId == "r-1"  # type: ignore[union-attr]
    assert other.active_for("console/console/c2").runId == "r-2"  # type: ignore[union-attr]
    assert other.active_for("console/console/c3") is None
    ended = store.save(store.load("r-1").model_copy(update={"state": "done"}))  # type: ignore[union-attr]
    assert ended.finished
    assert other.active_for("console/console/c1") is None, "an ended run is no conversation's active run"
    assert other.active_for("console/console/c2").runId == "r-2"  # type: ignore[union-attr]
    assert [found.runId for found in other.unfinished()] == ["r-2"]


def test_events_are_kept_in_order_and_a_removed_run_is_gone(backend: Backend) -> None:
    store = backend.runs()
    store.create(run("r-1"), "console/console/c1")
    store.create(run("r-2", "c2"), None)
    store.append_event("r-1", "step.running", step="Plan", at=utc_now_iso())
    store.append_event("r-1", "step.succeeded", step="Plan", exitCode=0)
    store.close_events()
    assert [event["event"] for event in backend.runs().events("r-1")] == ["run.created", "step.running",
                                                                          "step.succeeded"]
    assert [event["event"] for event in backend.runs().events("r-1", limit=1)] == ["step.succeeded"]
    other = backend.runs()
    other.request_cancel("r-1")
    assert store.cancel_requests(["r-1", "r-2"]) == {"r-1"}
    store.clear_cancel("r-1")
    assert other.cancel_requests(["r-1"]) == set()
    assert other.remove("r-1") and not other.remove("r-1")
    assert store.load("r-1") is None and store.events("r-1") == []
    assert [found.runId for found in store.recent(10)] == ["r-2"]
    assert store.active_for("console/console/c1") is None


def test_a_restart_finds_what_to_recover_and_each_conversations_newest_run(backend: Backend) -> None:
    store = backend.runs()
    store.create(run("r-1", "c1"), "console/console/c1")
    next_tick()
    store.create(run("r-2", "c1"), None)  # newer runs of c1 the association lost (a power cut)
    next_tick()
    store.create(run("r-4", "c1"), None)
    done = store.save(store.load("r-1").model_copy(update={"state": "done"}))  # type: ignore[union-attr]
    store.create(run("r-3", "c3").model_copy(update={"state": "done", "delivery": "reply"}), None)
    restarted = backend.runs()
    assert [found.runId for found in restarted.needing_recovery()] == ["r-1", "r-2", "r-4"], \
        "unfinished, or finished with the result not yet delivered"
    restarted.restore_active(restarted.unfinished())
    assert restarted.active_for("console/console/c1").runId == "r-4"  # type: ignore[union-attr]
    assert done.finished and restarted.active_runs().get("console/console/c1") == "r-4"


def test_a_shared_store_lists_queued_runs_due_first_and_the_running_ones(backend: Backend) -> None:
    store = backend.runs()
    store.create(run("r-later", "c1").model_copy(update={"job": JobInfo(next_retry_at="2999-01-01T00:00:00.000Z")}),
                 None)
    next_tick()
    store.create(run("r-due", "c2"), None)
    store.create(run("r-running", "c3").model_copy(update={"state": "running"}), None)
    if not store.shared:  # the processes of one home claim from coordination/work_queue.json instead
        assert (store.queued(10), store.running_ids()) == (None, None)
        return
    assert [run_id for run_id, _ in store.queued(10)] == ["r-due", "r-later"]
    assert store.queued(1) == [("r-due", None)]
    assert store.running_ids() == ["r-running"]


def test_a_conversations_last_run_is_its_newest_finished_or_not_and_never_another_conversations(
        backend: Backend) -> None:
    store = backend.runs()
    assert store.last_for("console/console/c1") is None
    store.create(run("r-1", "c1"), "console/console/c1")
    next_tick()
    store.create(run("r-2", "c1"), None)  # a run its message waits for: no conversation's active run yet
    next_tick()
    store.create(run("r-3", "c2"), "console/console/c2")
    next_tick()
    store.save(store.load("r-1").model_copy(update={"state": "running"}))  # type: ignore[union-attr]
    other = backend.runs()
    assert other.last_for("console/console/c1").runId == "r-2"  # type: ignore[union-attr]
    ended = store.save(store.load("r-2").model_copy(update={"state": "done", "delivery": "reply"}))  # type: ignore[union-attr]
    if hasattr(store, "settle"):  # the file store keeps a settled run as a line of its archive
        store.settle(ended)
    found = backend.runs().last_for("console/console/c1")
    assert found is not None and (found.runId, found.state) == ("r-2", "done")
    assert other.last_for("console/console/c2").runId == "r-3"  # type: ignore[union-attr]
    assert other.last_for("console/console/c9") is None
