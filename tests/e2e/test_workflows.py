"""Workflows end to end (specs 000, 001, 003): crash resume, several processes, the prompt inbox, examples."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.testing import wait_until
from tests.e2e.conftest import ORCHESTRATOR, PROVIDERS, Switchyard, both_backends, provider_calls
from tests.process import pid_alive

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120), both_backends]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GATED_AGENT = """
    import json, os, sys, time
    prompt = sys.stdin.read()
    step = os.environ["SWITCHYARD_STEP_ID"]
    with open(os.environ["FAKE_LOG"], "a") as log:
        log.write(json.dumps({"kind": "agent", "step": step, "run": os.environ["SWITCHYARD_RUN_ID"],
                             "pid": os.getpid()}) + "\\n")
    gate = os.environ.get("GATE_" + step.upper())
    while gate and not os.path.exists(gate):
        time.sleep(0.02)
    print(step + " done")
"""
FLAKY = ("import os, sys, json, pathlib; run = os.environ['SWITCHYARD_RUN_ID']; "
         "p = pathlib.Path(os.environ['FAKE_STATE']) / ('flaky-' + run); n = int(p.read_text()) if p.exists() else 0; "
         "p.write_text(str(n + 1)); log = open(os.environ['FAKE_LOG'], 'a'); "
         "log.write(json.dumps({'kind': 'flaky', 'run': run, 'owner': os.getppid()}) + chr(10)); "
         "sys.exit(0 if n else 1)")


def _orchestrator(**changes: Any) -> dict[str, Any]:
    config: dict[str, Any] = json.loads(json.dumps(ORCHESTRATOR))
    config.update(changes)
    return config


def _job_events(switchyard: Switchyard, job_id: str) -> list[str]:
    return [e["event"] for e in switchyard.events() if e.get("job_id") == job_id and e["event"].startswith("job.")]


def _state(switchyard: Switchyard, run_id: str) -> dict[str, Any]:
    return switchyard.run_state(run_id)


def test_kill_9_in_step_2_resumes_there_without_rerunning_step_1(
    switchyard: Switchyard, fake_log: Path, tmp_path: Path
) -> None:
    agent = tmp_path / "gated_agent.py"
    agent.write_text(textwrap.dedent(GATED_AGENT))
    gate = tmp_path / "gate-two"
    orchestrator = _orchestrator(reply_within_sec=0.2, agents={"g": {"provider": "gated", "prompt": "go"}},
                                 workflows={"three": {"description": "three agent steps", "steps": [
                                     {"id": "One", "agent": "g"}, {"id": "Two", "agent": "g"},
                                     {"id": "Three", "agent": "g"}]}})
    providers = {"fake_selector": {"command": [sys.executable, str(PROVIDERS / "selector.py")]},
                 "fake_diagnostics": {"command": [sys.executable, str(PROVIDERS / "diagnostics.py")]},
                 "gated": {"command": [sys.executable, str(agent)], "env": {"GATE_TWO": str(gate)}}}
    switchyard.configure({"providers": providers}, orchestrator)
    switchyard.start()
    switchyard.send("start three", messageId="t1")
    run_id = switchyard.reply_to("t1")[0]["workflowRunId"]
    wait_until(lambda: _agent_steps(fake_log) == ["One", "Two"], 20)
    orphan = [c for c in provider_calls(fake_log) if c["kind"] == "agent"][-1]["pid"]
    switchyard.kill()
    assert _state(switchyard, run_id)["state"] == "running"
    gate.touch()
    switchyard.start()
    wait_until(lambda: _state(switchyard, run_id).get("delivery"), 30)
    assert _agent_steps(fake_log) == ["One", "Two", "Two", "Three"]
    state = _state(switchyard, run_id)
    assert state["state"] == "done" and state["steps"]["One"]["output"] == "One done\n"
    result = switchyard.reply_to("t1", count=2)[-1]
    assert result["message"] == "Three done" and result["workflowRunId"] == run_id
    requeued = [e for e in switchyard.events("job.requeued") if e["job_id"] == run_id]
    assert requeued[0]["reason"].startswith("recovered after a restart")
    if pid_alive(orphan):  # the killed process's agent; it exits by itself once its gate exists
        os.kill(orphan, signal.SIGKILL)


def test_two_processes_share_a_home_without_overlap_or_double_runs(
    switchyard: Switchyard, fake_log: Path
) -> None:
    workflows = {**ORCHESTRATOR["workflows"], "flaky": {
        "description": "fails once", "max_retries": 1,
        "steps": [{"id": "Flaky", "command": [sys.executable, "-c", FLAKY]}]}}
    switchyard.configure(None, _orchestrator(workflows=workflows, retry_backoff_sec=0.3))
    switchyard.start()
    second = switchyard.another()
    second.start()
    try:
        shared = [switchyard.send(f"sleep 0.2 s{i}", conversationId="shared", messageId=f"s{i}") for i in range(8)]
        flaky = [switchyard.send("start flaky", conversationId=f"f{i}", messageId=f"f{i}") for i in range(6)]
        for message in shared + flaky:
            switchyard.reply_to(message["messageId"], timeout=60)
        runs = {switchyard.reply_to(m["messageId"])[0]["workflowRunId"] for m in flaky}
        wait_until(lambda: all(_state(switchyard, r).get("delivery") for r in runs), 30)
    finally:
        assert second.stop() == 0
    calls = provider_calls(fake_log)
    mine = sorted((c for c in calls if c["kind"] in ("start", "end") and c["conversation"] == "shared"),
                  key=lambda c: c["t"])
    assert [c["kind"] for c in mine] == ["start", "end"] * 8, "one conversation was processed in parallel"
    replies = Counter(c["run"] for c in calls if c["kind"] == "agent")
    assert len(replies) == 8 and set(replies.values()) == {1}
    executions = Counter(c["run"] for c in calls if c["kind"] == "flaky")
    assert executions == {run: 2 for run in runs}
    running = Counter(e["job_id"] for e in switchyard.events("job.running") if e["job_id"] in runs)
    assert running == {run: 2 for run in runs}
    assert all(_state(switchyard, run)["state"] == "done" for run in runs)


def test_prompt_inbox_end_to_end_with_file_movements(switchyard: Switchyard) -> None:
    workflows = {
        "review": {"description": "review a prompt", "steps": [{"id": "Review", "agent": "writer"}]},
        "broken": {"description": "always fails", "steps": [
            {"id": "Break", "command": [sys.executable, "-c", "raise SystemExit(2)"], "on_failure": "fatal"}]},
        "flaky": {"description": "fails once", "max_retries": 1, "steps": [
            {"id": "Flaky", "command": [sys.executable, "-c", FLAKY]}]},
    }
    channels = [
        {"id": "prompts", "type": "inbox", "workflow": "review", "poll_ms": 50, "settle_ms": 0},
        {"id": "strict", "type": "inbox", "root": "strict", "workflow": "broken", "poll_ms": 50, "settle_ms": 0},
        {"id": "slow", "type": "inbox", "root": "slow", "workflow": "flaky", "poll_ms": 50, "settle_ms": 0},
    ]
    switchyard.configure({"channels": channels}, _orchestrator(workflows=workflows, retry_backoff_sec=3))
    switchyard.start()
    home = switchyard.home.root
    good = _write(home / "inbox/app/main/20250101T120000_fix-login.md", "Fix the login page.")
    bad = _write(home / "strict/app/dev/20250102T080000_break.md", "Break it.")
    slow = _write(home / "slow/lib/feature/x/20250103T090000_retry.md", "Try twice.")
    done = wait_until(lambda: list((home / "processed/app/main").glob("*/20250101T120000_fix-login.md")), 30)[0]
    job_id = done.parent.name
    wait_until(lambda: "job.archived" in _job_events(switchyard, job_id), 10)
    result = (done.parent / "result.md").read_text()
    assert not good.exists() and result.startswith("agent Review answered: write about Fix the login page.")
    assert _job_events(switchyard, job_id) == ["job.created", "job.running", "job.succeeded", "job.archived"]
    [archived] = [e for e in switchyard.events("job.archived") if e["job_id"] == job_id]
    assert archived["processed_path"] == str(done) and (archived["repo"], archived["branch"]) == ("app", "main")
    failed = wait_until(lambda: list((home / "failed/app/dev").glob("*/20250102T080000_break.md")), 30)[0]
    assert not bad.exists()
    wait_until(lambda: "job.archived" in _job_events(switchyard, failed.parent.name), 10)
    assert _job_events(switchyard, failed.parent.name) == [
        "job.created", "job.running", "job.failed.final", "job.archived"]
    wait_until(lambda: [e for e in switchyard.events("job.requeued") if e.get("repo") == "lib"], 30)
    assert slow.exists(), "a retryable failure must leave the prompt file in place"
    assert switchyard.stop() == 0
    switchyard.start()
    moved = wait_until(lambda: list((home / "processed/lib/feature/x").glob("*/20250103T090000_retry.md")), 30)
    slow_job = moved[0].parent.name
    wait_until(lambda: "job.archived" in _job_events(switchyard, slow_job), 10)
    assert _job_events(switchyard, slow_job) == [
        "job.created", "job.running", "job.failed.retryable", "job.requeued", "job.running", "job.succeeded",
        "job.archived"]
    assert Counter(e["job_id"] for e in switchyard.events("job.created")) == {
        job_id: 1, failed.parent.name: 1, slow_job: 1}
    ledger = json.loads((switchyard.home.state / "inbox" / "slow" / f"{slow_job}.json").read_text())
    assert ledger["state"] == "done" and ledger["processed_path"] == str(moved[0]) and ledger["retries"] == 1


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.rename(path)
    return path


def test_the_example_workflow_waits_loops_and_asks(switchyard: Switchyard) -> None:
    switchyard.configure(None, yaml.safe_load((EXAMPLES / "orchestrator.yaml").read_text()))
    switchyard.start()
    switchyard.send("tasks fix the login page", messageId="e1", conversationId="demo")
    question = switchyard.reply_to("e1", timeout=40)[0]
    assert question["message"].startswith("Worked 3 tasks. Publish the report? (yes/no)")
    run_id = question["workflowRunId"]
    switchyard.send("yes", messageId="e2", conversationId="demo")
    report = switchyard.reply_to("e2", timeout=40)[0]["message"]
    assert report.startswith("Report: you said yes after [") and "fix the login page: tidy up" in report
    workspace = switchyard.home.orchestrators / "main"
    moved = sorted(p.name for p in (workspace / "processed").glob(f"*/{run_id}-*.task"))
    assert moved == [f"{run_id}-{i}.task" for i in range(3)]
    assert not list((workspace / "inbox" / "engineer").glob(f"{run_id}-*"))
    shown = switchyard.cli("runs", "show", run_id)
    assert shown.returncode == 0 and f"Run {run_id} (workflow tasks): done" in shown.stdout
    assert "✓ Wait (3 file(s)" in shown.stdout
    assert run_id in switchyard.cli("runs").stdout


def _agent_steps(fake_log: Path) -> list[str]:
    return [c["step"] for c in provider_calls(fake_log) if c["kind"] == "agent"]

