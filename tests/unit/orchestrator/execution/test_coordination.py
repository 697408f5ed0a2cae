"""orchestrator/execution/coordination.py: the spec-001 files, run locks, orphan recovery and retention."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import orchestrator.execution.coordination
import orchestrator.execution.watchdog
from gateway.disk.locks import LockDirectory
from gateway.home import Home
from gateway.testing import async_wait_until
from orchestrator.execution.claims import job_lock
from orchestrator.execution.coordination import Coordination
from orchestrator.runs.state import run_id_for
from tests.fakes.orchestrator import make_message

GATED = "import os, time\nwhile not os.path.exists({gate!r}):\n    time.sleep(0.01)\nprint('built')"


def _config(gate: Path) -> str:
    code = json.dumps(GATED.format(gate=str(gate)))
    return f"""
        reply_within_sec: 0
        agents: {{planner: {{provider: echo, prompt: '{{"summary": "plan ready"}}'}},
                 tester: {{provider: echo, prompt: "tested"}}}}
        workflows:
          w:
            steps:
              - {{id: Plan, agent: planner}}
              - {{id: Build, command: [python3, -c, {code}]}}
              - {{id: Test, agent: tester}}
        rules: {{default_workflow: w}}
    """


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _read(path: Path) -> Any:
    return json.loads(path.read_text())


def _maybe(path: Path) -> Any:
    """The file's JSON, or None while it does not exist."""
    try:
        return _read(path)
    except FileNotFoundError:
        return None


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the files the coordination directory writes (atomically), in order."""
    written: list[str] = []
    real = orchestrator.execution.coordination.atomic_write

    def counted(path: Path, *args: Any, **kwargs: Any) -> None:
        written.append(path.name)
        real(path, *args, **kwargs)

    monkeypatch.setattr(orchestrator.execution.coordination, "atomic_write", counted)
    return written


async def test_the_views_are_written_together_at_most_every_flush_interval(home: Home, writes: list[str]) -> None:
    coordination = Coordination(home)
    writes.clear()  # the folder's README, written when it is opened, is not a view
    root = home.coordination
    for index in range(50):  # runs that start and end within one interval change neither file
        coordination.enqueue({"id": f"r{index}", "created_at": "2026-01-01T00:00:00Z"})
        coordination.activate({"task_id": f"r{index}", "status": "in_progress"})
        coordination.touch(f"r{index}", step="Reply")
        coordination.deactivate(f"r{index}")
    coordination.enqueue({"id": "waiting", "created_at": "2026-01-01T00:00:00Z"})
    coordination.activate({"task_id": "busy", "status": "in_progress"})
    assert [t["id"] for t in coordination.pending()] == ["waiting"]  # this process sees its changes at once
    assert [a["task_id"] for a in coordination.active()] == ["busy"]
    assert writes == []
    await async_wait_until(lambda: (root / "active_work.json").exists())
    assert sorted(writes) == ["active_work.json", "work_queue.json"]  # one write each, for all 52 changes
    assert [a["task_id"] for a in _read(root / "active_work.json")] == ["busy"]
    assert [t["id"] for t in _read(root / "work_queue.json")["tasks"]] == ["waiting"]


async def test_a_tasks_checkpoints_within_an_interval_write_the_last_one_and_its_end_at_once(
    home: Home, writes: list[str]
) -> None:
    coordination = Coordination(home)
    writes.clear()  # the folder's README, written when it is opened, is not a view
    metadata = home.coordination / "checkpoints" / "r1" / "metadata.json"
    for phase in range(1, 5):
        coordination.checkpoint("r1", {"metadata": {"phase": phase}, "state": {"phase": phase}})
    assert writes == []
    await async_wait_until(metadata.exists)
    assert sorted(writes) == ["metadata.json", "state.json"] and _read(metadata) == {"phase": 4}
    coordination.checkpoint("r1", {"metadata": {"phase": 5, "completed_at": "now"}}, now=True)
    assert _read(metadata) == {"phase": 5, "completed_at": "now"}


async def test_coordination_files_follow_a_run(flow: Callable[..., Any], home: Home, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    f = await flow(_config(gate))
    _, message = await f.send("go")
    run_id = run_id_for(message)
    root = home.coordination
    await async_wait_until(lambda: f.run(run_id).currentStep == "Build")
    # the two views are written within a quarter second of a change
    await async_wait_until(lambda: [(a["task_id"], a["status"], a["context"]["step"])
                                    for a in _maybe(root / "active_work.json") or []]
                           == [(run_id, "in_progress", "Build")])
    assert _maybe(root / "work_queue.json") in ({"tasks": []}, None)
    checkpoint = root / "checkpoints" / run_id
    assert _read(checkpoint / "metadata.json")["phase"] == 1
    assert _read(checkpoint / "context.json")["outputs"]["Plan"] == '{"summary": "plan ready"}'
    assert LockDirectory.read(LockDirectory(root / "locks", holder="x").path_for(job_lock(run_id))) is not None
    gate.touch()
    await f.settled(run_id)
    await async_wait_until(lambda: _maybe(root / "active_work.json") == [])
    metadata = _read(checkpoint / "metadata.json")
    assert (metadata["phase"], metadata["total_phases"], metadata["state"]) == (3, 3, "done")
    assert metadata["completed_at"]
    assert [a["step"] for a in _read(checkpoint / "artifacts.json")] == ["Plan", "Build", "Test"]
    [report] = [json.loads(line) for line in (root / "completed.jsonl").read_text().splitlines()]
    assert (report["task_id"], report["status"], report["agent"]) == (run_id, "complete", "tester")
    assert report["handoff_context"] == {"summary": "tested", "key_findings": [], "open_questions": []}
    assert [Path(p).name for p in report["artifacts"]] == ["Plan.txt", "Build.txt", "Test.txt"]
    assert list((root / "locks").iterdir()) == []


async def test_a_waiting_retry_is_listed_in_the_work_queue(flow: Callable[..., Any], home: Home) -> None:
    f = await flow("""
        max_retries: 1
        retry_backoff_sec: 600
        reply_within_sec: 0
        workflows: {w: {steps: [{id: Fail, command: [python3, -c, "raise SystemExit(1)"]}]}}
        rules: {default_workflow: w}
    """)
    ack, message = await f.send("go")
    run_id = run_id_for(message)
    await async_wait_until(lambda: f.run(run_id).job.retries == 1)
    await async_wait_until(lambda: bool((_maybe(home.coordination / "work_queue.json") or {}).get("tasks")))
    [task] = _read(home.coordination / "work_queue.json")["tasks"]
    assert (task["id"], task["type"], task["agent"]) == (run_id, "workflow", "w")
    assert task["context"]["retries"] == 1 and task["context"]["next_retry_at"] == f.run(run_id).job.next_retry_at
    status, _ = await f.send("/status")
    assert "queued, step 1/1 Fail, retries 1/1, next try at " in status.message
    assert ack.message.startswith(f"Started run {run_id}")


def _orphan(home: Home, flow_config: str, write_config: Callable[[str], Path], *, expires: datetime,
            pid: int) -> str:
    """A run left `running` by another process, with its job lock and active_work entry."""
    write_config(flow_config)
    message = make_message("go")
    run_id = run_id_for(message)
    folder = home.runs / run_id
    folder.mkdir(parents=True)
    now = _iso(datetime.now(UTC))
    (folder / "state.json").write_text(json.dumps({
        "runId": run_id, "workflowId": "w", "orchestratorId": "main", "state": "running", "currentStep": "Test",
        "createdAt": now, "updatedAt": now, "input": {}, "message": message.model_dump(mode="json"),
        "conversation": {"channel": "console", "channelProfileId": "console", "conversationId": "c1"},
        "steps": {"Plan": {"status": "completed", "output": "old"}, "Test": {"status": "running"}},
        "job": {"job_id": run_id, "owner": "elsewhere:1"}}))
    locks = LockDirectory(home.coordination / "locks", holder="elsewhere:1")
    locks.path_for(job_lock(run_id)).write_text(json.dumps({
        "holder": "elsewhere:1", "resource": job_lock(run_id), "acquired_at": now, "expires_at": _iso(expires),
        "pid": pid}))
    Coordination(home).activate({"task_id": run_id, "agent": "w", "status": "in_progress", "started_at": now,
                                 "last_update": now, "context": {"owner": "elsewhere:1"}})
    return run_id


ORPHAN_CONFIG = """
    reply_within_sec: 0
    workflows: {w: {steps: [{id: Plan, provider: echo, prompt: new}, {id: Test, provider: echo,
                                                                       prompt: "resumed after {{steps.Plan.output}}"}]}}
"""


async def test_an_expired_run_lock_is_reclaimed_and_the_run_resumes(
    home: Home, write_config: Callable[[str], Path], flow: Callable[..., Any]
) -> None:
    run_id = _orphan(home, ORPHAN_CONFIG, write_config, expires=datetime.now(UTC) - timedelta(seconds=1),
                     pid=os.getpid())
    f = await flow(ORPHAN_CONFIG)
    run = await f.settled(run_id)
    assert run.state == "done" and f.outbox.payloads[-1].message == "resumed after old"
    requeued = [e for e in f.job_events(run_id) if e["event"] == "job.requeued"]
    assert requeued[0]["reason"].startswith("recovered after a restart")


async def test_a_live_lock_is_respected_until_it_expires(
    home: Home, write_config: Callable[[str], Path], flow: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(orchestrator.execution.watchdog, "RECLAIM_SEC", 0.1)
    run_id = _orphan(home, ORPHAN_CONFIG, write_config, expires=datetime.now(UTC) + timedelta(seconds=60),
                     pid=os.getpid())
    f = await flow(ORPHAN_CONFIG)
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:
        assert f.run(run_id).state == "running"
        await asyncio.sleep(0.05)
    lock = LockDirectory(home.coordination / "locks", holder="x").path_for(job_lock(run_id))
    content = _read(lock)
    lock.write_text(json.dumps({**content, "expires_at": _iso(datetime.now(UTC) - timedelta(seconds=1))}))
    run = await f.settled(run_id)
    assert run.state == "done"
    assert any(e.get("reason") == "recovered: the process running it is gone" for e in f.job_events(run_id))


def test_retention_archives_old_files_drops_old_checkpoints_and_frees_stale_locks(home: Home) -> None:
    coordination = Coordination(home)
    old, recent = datetime.now(UTC) - timedelta(days=8), datetime.now(UTC) - timedelta(days=1)
    coordination.checkpoint("old-run", {"metadata": {"completed_at": _iso(old)}})
    coordination.checkpoint("recent-run", {"metadata": {"completed_at": _iso(recent)}})
    coordination.checkpoint("running-run", {"metadata": {"completed_at": None}})
    stale = coordination.handoff({"task_id": "old-run", "from_step": "Plan"})
    fresh = coordination.handoff({"task_id": "recent-run", "from_step": "Plan"})
    month_ago = time.time() - 31 * 86400
    os.utime(stale, (month_ago, month_ago))
    coordination.complete({"task_id": "old-run", "status": "complete"})
    locks = LockDirectory(home.coordination / "locks", holder="me", ttl_s=60)
    assert locks.acquire("live")
    expired = LockDirectory(home.coordination / "locks", holder="gone", ttl_s=-1)
    assert expired.acquire("expired")
    dead = locks.path_for("dead")
    dead.write_text(json.dumps({"holder": "h", "resource": "dead", "acquired_at": _iso(recent),
                                "expires_at": _iso(datetime.now(UTC) + timedelta(hours=1)), "pid": 2 ** 22 + 7}))
    report = coordination.clean()
    assert report["checkpoints_removed"] == ["old-run"]
    assert report["archived"] == [f"archive/handoffs/{stale.name}"]
    assert sorted(report["locks_freed"]) == ["dead", "expired"]
    assert sorted(p.name for p in (home.coordination / "checkpoints").iterdir()) == ["recent-run", "running-run"]
    assert fresh.exists() and (home.coordination / "archive" / "handoffs" / stale.name).exists()
    assert len(coordination.completed()) == 1
    assert [p.name for p in (home.coordination / "locks").glob("*.json")] == [locks.path_for("live").name]


def test_a_lock_being_written_is_never_taken_for_a_stale_one(home: Home) -> None:
    locks = LockDirectory(home.coordination / "locks", holder="me")
    path = locks.path_for("job:r-1")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    assert not locks.acquire("job:r-1") and locks.clean_expired() == []
    old = time.time() - 120
    os.utime(path, (old, old))
    assert locks.acquire("job:r-1") and _read(path)["holder"] == "me"


def test_racing_holders_get_one_lock(home: Home) -> None:
    folder = home.coordination / "locks"
    barrier = threading.Barrier(12)

    def take(index: int) -> bool:
        locks = LockDirectory(folder, holder=f"h{index}")
        barrier.wait()
        return locks.acquire("job:contended")

    with ThreadPoolExecutor(12) as pool:
        results = list(pool.map(take, range(12)))
    assert results.count(True) == 1
    assert [p.name for p in folder.iterdir()] == [LockDirectory(folder, holder="x").path_for("job:contended").name]


async def test_a_one_step_run_leaves_a_completion_report_and_no_checkpoint(
    flow: Callable[..., Any], home: Home
) -> None:
    f = await flow("""
        workflows: {chat: {steps: [{id: Reply, provider: echo, prompt: "the answer"}]}}
        rules: {default_workflow: chat}
    """)
    reply, message = await f.send("hi")
    run_id = run_id_for(message)
    assert reply.message == "the answer"
    [report] = [json.loads(line) for line in (home.coordination / "completed.jsonl").read_text().splitlines()]
    assert (report["task_id"], report["status"]) == (run_id, "complete")
    assert not (home.coordination / "checkpoints" / run_id).exists()
