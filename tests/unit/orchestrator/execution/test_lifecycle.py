"""orchestrator/runs/jobs.py and lifecycle.py: the transition table, retries, failure categories, cancel."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.home import Home
from gateway.telemetry.events import read_events
from gateway.testing import async_wait_until
from orchestrator.runs.jobs import TRANSITIONS, IllegalTransition, RetryPolicy, check_transition, parse_iso
from orchestrator.runs.state import run_id_for
from orchestrator.storage.files.runs import RunStore
from tests.fakes.orchestrator import PY
from tests.process import pid_alive

FAIL = f"[{PY}, -c, \"import sys; print('nope', file=sys.stderr); sys.exit(3)\"]"


def _config(steps: str, head: str = "max_retries: 2\nretry_backoff_sec: 0.05", within: float = 20) -> str:
    lines = "".join(f"        {line}\n" for line in head.splitlines())
    return f"""
{lines}        reply_within_sec: {within}
        agents: {{a: {{provider: echo}}}}
        workflows:
          w:
            steps:
{steps}
        rules: {{default_workflow: w}}
    """


# Spec 003 (Execution and Retry stages), written out: queued -> running -> done | failed;
# failed -> queued (a retry) | failed_final (fatal or out of retries); done and failed_final stay.
SPEC_003 = {("queued", "running"), ("running", "done"), ("running", "failed"),
            ("failed", "queued"), ("failed", "failed_final")}
# What Switchyard adds (DESIGN.md, Workflows): an input step pauses and its answer requeues the run;
# a run interrupted by a stop or crash is requeued and resumed; /cancel ends any unfinished run.
SWITCHYARD = {("running", "waiting_input"), ("waiting_input", "queued"), ("running", "queued"),
              ("queued", "cancelled"), ("running", "cancelled"), ("waiting_input", "cancelled")}
ALLOWED = SPEC_003 | SWITCHYARD
SPEC_STATES = ["queued", "running", "waiting_input", "done", "failed", "failed_final", "cancelled"]


def test_the_transition_table_is_exactly_spec_003_plus_the_documented_additions() -> None:
    assert sorted(TRANSITIONS) == sorted(SPEC_STATES)
    table = {(current, target) for current, targets in TRANSITIONS.items() for target in targets}
    assert table == ALLOWED, f"missing {sorted(ALLOWED - table)}, unexpected {sorted(table - ALLOWED)}"


@pytest.mark.parametrize(("current", "target"), sorted(ALLOWED))
def test_every_allowed_transition_passes(current: str, target: str) -> None:
    check_transition("r-1", current, target)


@pytest.mark.parametrize(("current", "target"), [
    (a, b) for a, b in itertools.product(SPEC_STATES, SPEC_STATES) if (a, b) not in ALLOWED])
def test_every_other_transition_raises(current: str, target: str) -> None:
    with pytest.raises(IllegalTransition, match=f"{current} -> {target} is not allowed"):
        check_transition("r-1", current, target)


def test_backoff_doubles_up_to_the_cap_and_fatal_is_never_retried() -> None:
    policy = RetryPolicy(max_retries=5, backoff_sec=2, backoff_max_sec=10)
    assert [policy.delay_sec(n) for n in range(4)] == [2, 4, 8, 10]
    assert policy.allows("retryable", 4) and policy.allows("transient", 0)
    assert not policy.allows("retryable", 5) and not policy.allows("fatal", 0)


async def test_retry_then_failed_final_with_the_events_in_order(flow: Callable[..., Any]) -> None:
    f = await flow(_config(f"              - {{id: Build, command: {FAIL}}}"))
    answer, message = await f.send("go")
    run_id = run_id_for(message)
    events = f.job_events(run_id)
    assert [(e["event"], e["state"], e.get("retries")) for e in events] == [
        ("job.created", "queued", 0), ("job.running", "running", 0),
        ("job.failed.retryable", "failed", 0), ("job.requeued", "queued", 1), ("job.running", "running", 1),
        ("job.failed.retryable", "failed", 1), ("job.requeued", "queued", 2), ("job.running", "running", 2),
        ("job.failed.final", "failed_final", 2)]
    retryable = events[2]
    assert retryable["failure_category"] == "retryable" and "exited with code 3: nope" in retryable["failure_reason"]
    assert parse_iso(retryable["next_retry_at"]) > parse_iso(retryable["ts"])
    assert events[3]["next_retry_at"] == retryable["next_retry_at"]
    assert events[1]["owner"].endswith(f":{os.getpid()}") and events[1]["started_at"]
    run = f.run(run_id)
    assert (run.state, run.job.retries, run.job.max_retries, run.job.failure_category) == (
        "failed_final", 2, 2, "retryable")
    assert answer.message.startswith(f"Run {run_id} (workflow w) failed at step Build: Build exited with code 3")
    assert f.outbox.payloads == [] and run.delivery == "reply"


async def test_a_retry_resumes_at_the_failed_step(flow: Callable[..., Any], tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    flaky = (f"import pathlib, sys; p = pathlib.Path({str(tmp_path / 'count')!r}); n = int(p.read_text()) "
             "if p.exists() else 0; p.write_text(str(n + 1)); sys.exit(0 if n else 1)")
    steps = f"""
              - {{id: Plan, command: [{PY}, -c, "open({str(calls)!r}, 'a').write('plan ')"]}}
              - {{id: Flaky, command: [{PY}, -c, "{flaky}"]}}
              - {{id: Done, provider: echo, prompt: finished}}
    """
    f = await flow(_config(steps))
    answer, message = await f.send("go")
    assert answer.message == "finished"
    assert calls.read_text().split() == ["plan"]
    assert f.run(run_id_for(message)).job.retries == 1


async def test_on_failure_fatal_is_not_retried(flow: Callable[..., Any]) -> None:
    f = await flow(_config(f"              - {{id: Build, command: {FAIL}, on_failure: fatal}}"))
    _, message = await f.send("go")
    events = [e["event"] for e in f.job_events(run_id_for(message))]
    assert events == ["job.created", "job.running", "job.failed.final"]
    assert f.run(run_id_for(message)).job.failure_category == "fatal"


async def test_a_step_removed_from_the_definition_is_a_fatal_failure(
    flow: Callable[..., Any], write_config: Callable[[str], Path], workspace: Path
) -> None:
    steps = """
              - {id: Wait, wait_for: {glob: "go.flag", timeout_sec: 20, poll_ms: 20}}
              - {id: Gone, provider: echo, prompt: never}
    """
    f = await flow(_config(steps, within=0))
    _, message = await f.send("go")
    run_id = run_id_for(message)
    await async_wait_until(lambda: f.run(run_id).currentStep == "Wait")
    write_config(_config("              - {id: Wait, wait_for: {glob: go.flag}}"))
    (workspace / "go.flag").write_text("")
    run = await f.settled(run_id)
    assert run.state == "failed_final" and run.job.failure_category == "fatal" and run.job.retries == 0
    assert "step Gone is no longer in workflow w" in (run.error or "")


async def test_cancel_while_waiting_for_input(flow: Callable[..., Any]) -> None:
    f = await flow(_config("              - {id: Ask, input: {prompt: \"Sure?\"}}"))
    _, message = await f.send("go")
    run_id = run_id_for(message)
    assert f.run(run_id).state == "waiting_input"
    answer, _ = await f.send("/cancel")
    assert answer.message == f"Stopped. Cancelled run {run_id} (workflow w)."
    run = f.run(run_id)
    assert run.state == "cancelled" and run.steps["Ask"].error == "cancelled"
    assert [e["event"] for e in f.job_events(run_id)][-1] == "job.cancelled"


async def test_a_cancel_request_from_another_process_kills_the_step(
    flow: Callable[..., Any], tmp_path: Path, home: Home
) -> None:
    pid_file = tmp_path / "pid"
    sleeper = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    f = await flow(_config(f"              - {{id: Sleep, command: [{PY}, -c, \"{sleeper}\"]}}", within=0))
    _, message = await f.send("go")
    run_id = run_id_for(message)
    await async_wait_until(lambda: pid_file.exists() and pid_file.read_text())
    pid = int(pid_file.read_text())
    (home.runs / run_id / "cancel.request").write_text("12345\n")
    run = await f.settled(run_id)
    assert run.state == "cancelled" and not (home.runs / run_id / "cancel.request").exists()
    await async_wait_until(lambda: not pid_alive(pid), 5)
    assert f.outbox.payloads[-1].message == f"Run {run_id} (workflow w) was cancelled."


async def test_per_run_events_and_state_shape(flow: Callable[..., Any], home: Home) -> None:
    f = await flow(_config("              - {id: Reply, agent: a}"))
    _, message = await f.send("hi")
    run_id = run_id_for(message)
    # a settled one-step run is one line of the day's archive: its state and its events, no folder left
    [line] = [json.loads(line) for log in (home.runs / ".archive").glob("*.jsonl")
              for line in log.read_text().splitlines() if json.loads(line)["run"]["runId"] == run_id]
    assert not (home.runs / run_id).exists()
    state = line["run"]
    assert state["state"] == "done" and state["steps"]["Reply"]["status"] == "completed"
    assert {"job_id", "retries", "max_retries", "next_retry_at", "owner", "started_at", "finished_at"} <= set(
        state["job"])
    run_events = [event["event"] for event in line["events"]]
    assert run_events[:2] == ["run.created", "job.created"] and run_events[-1] == "job.succeeded"
    assert [e["event"] for e in read_events(home.events_file) if e.get("job_id") == run_id][-1] == "job.succeeded"



async def test_a_chat_run_the_archive_refuses_is_kept_in_its_folder_finished_and_answered_once(
    flow: Callable[..., Any], home: Home
) -> None:
    # a run waited for is written in its final state only as its archived line; when that line cannot be
    # written, its state.json must say it ended and was answered, or a restart would run it again
    (home.runs / ".archive").parent.mkdir(parents=True, exist_ok=True)
    (home.runs / ".archive").write_text("not a folder")
    f = await flow(_config("              - {id: Reply, agent: a}"))
    answer, message = await f.send("hi")
    run_id = run_id_for(message)
    assert answer.message == "hi" and f.outbox.payloads == []  # answered as the reply, not pushed again
    state = json.loads((home.runs / run_id / "state.json").read_text())
    assert state["state"] == "done" and state["delivery"] == "reply"
    (home.runs / ".archive").unlink()
    store = RunStore(home)
    store.tidy()  # at the next start: archived, its folder gone
    assert not (home.runs / run_id).exists() and store.load(run_id).state == "done"
