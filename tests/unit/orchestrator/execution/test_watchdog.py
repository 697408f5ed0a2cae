"""orchestrator/execution/watchdog.py: a run whose job lock lapsed is written only while it is still this
execution's (`taken_over`, asked before each write of a run on a shared store)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from gateway.disk.locks import LockDirectory
from gateway.home import Home
from orchestrator.execution.claims import job_lock
from orchestrator.execution.watchdog import Watchdog
from orchestrator.runs.state import RunState, run_id_for
from orchestrator.storage.files.runs import RunStore
from tests.fakes.orchestrator import make_message

MESSAGE = make_message("go")


def _stored(home: Home, *, owner: str, started_at: str, updated_at: str) -> RunState:
    """The run of MESSAGE marked running by `owner` since `started_at`, written as the store keeps it, and read
    back."""
    message = MESSAGE
    run_id = run_id_for(message)
    folder = home.runs / run_id
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "state.json").write_text(json.dumps({
        "runId": run_id, "workflowId": "w", "orchestratorId": "main", "state": "running", "currentStep": "Test",
        "createdAt": started_at, "updatedAt": updated_at, "input": {}, "message": message.model_dump(mode="json"),
        "conversation": {"channel": "console", "channelProfileId": "console", "conversationId": "c1"},
        "steps": {"Test": {"status": "running"}},
        "job": {"job_id": run_id, "owner": owner, "started_at": started_at}}))
    run = RunStore(home, fsync=False).load(run_id)
    assert run is not None
    return run


def _watchdog(home: Home, locks: LockDirectory, tasks: dict[str, Any]) -> Watchdog:
    return Watchdog(home=home, store=RunStore(home, fsync=False), locks=locks,
                    claims=SimpleNamespace(reserved=set()),  # type: ignore[arg-type]
                    coordination=None, life=None,  # type: ignore[arg-type]
                    tasks=tasks, cancelled={}, wake=lambda: None, runs_retention_days=0)


def _locks(home: Home, holder: str) -> LockDirectory:
    return LockDirectory(home.coordination / "locks", holder=holder, ttl_s=60)


def test_a_run_whose_locks_were_just_renewed_is_not_asked_about(home: Home) -> None:
    live = _stored(home, owner="here:1", started_at="2026-01-01T00:00:00Z", updated_at="2026-01-01T00:00:00Z")
    assert _locks(home, "other:2").acquire(job_lock(live.runId))  # held elsewhere, but no renewal missed it
    assert not _watchdog(home, _locks(home, "here:1"), {live.runId: None}).taken_over(live)


def test_a_lapsed_lock_another_process_holds_means_the_run_was_taken_over(home: Home) -> None:
    live = _stored(home, owner="here:1", started_at="2026-01-01T00:00:00Z", updated_at="2026-01-01T00:00:00Z")
    watchdog = _watchdog(home, _locks(home, "here:1"), {live.runId: None})
    assert _locks(home, "other:2").acquire(job_lock(live.runId))
    watchdog._renew(time.monotonic())  # the renewal finds the lock held by another: lapsed
    assert watchdog.taken_over(live)


def test_a_lapsed_lock_taken_again_keeps_the_run_while_the_store_holds_this_execution(home: Home) -> None:
    live = _stored(home, owner="here:1", started_at="2026-01-01T00:00:00Z", updated_at="2026-01-01T00:00:00Z")
    watchdog = _watchdog(home, _locks(home, "here:1"), {live.runId: None})
    watchdog._renew(time.monotonic())  # nobody holds it: lapsed, and free to be taken again
    assert not watchdog.taken_over(live)
    assert not _locks(home, "other:2").acquire(job_lock(live.runId))  # it holds the lock again


def test_a_lapsed_lock_taken_again_loses_the_run_another_execution_wrote_since(home: Home) -> None:
    live = _stored(home, owner="here:1", started_at="2026-01-01T00:00:00Z", updated_at="2026-01-01T00:00:00Z")
    now = datetime.now(UTC).isoformat()
    _stored(home, owner="other:2", started_at=now, updated_at=now)  # claimed and written by another meanwhile
    watchdog = _watchdog(home, _locks(home, "here:1"), {live.runId: None})
    watchdog._renew(time.monotonic())
    assert watchdog.taken_over(live)
