"""orchestrator/execution/steps: agent, command, wait_for, for_each and input steps, run through the orchestrator."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.settings import ProviderSettings
from gateway.testing import async_wait_until
from orchestrator.execution.steps import wait as wait_module
from orchestrator.execution.steps.wait import matching_files
from orchestrator.runs.state import run_id_for
from tests.fakes.orchestrator import PY, ScriptedSelector

ITEM_CMD = "import sys; print('did', sys.argv[1]); sys.exit(3 if 'bad' in sys.argv[1] else 0)"


def _config(steps: str, *, within: float = 10, head: str = "") -> str:
    head = "".join(f"        {line}\n" for line in head.splitlines())
    return f"""
{head}        reply_within_sec: {within}
        agents: {{a: {{provider: echo, prompt: "agent saw {{{{message}}}}"}}}}
        workflows:
          w:
            steps:
{steps}
        rules: {{default_workflow: w}}
    """


async def test_agent_and_command_steps_see_earlier_outputs(flow: Callable[..., Any]) -> None:
    steps = f"""
              - {{id: Plan, agent: a}}
              - {{id: Json, provider: echo, prompt: '{{"title": "T1", "n": 2}}'}}
              - {{id: Cmd, command: [{PY}, -c, "import sys; print(sys.argv[1], sys.argv[2])",
                                    "{{{{steps.Plan.output}}}}", "{{{{steps.Json.json.title}}}}"]}}
    """
    f = await flow(_config(steps))
    answer, message = await f.send("hello")
    assert answer.message == "agent saw hello T1"
    run = f.run(run_id_for(message))
    assert [s.status for s in run.steps.values()] == ["completed"] * 3
    assert [s.kind for s in run.steps.values()] == ["agent", "agent", "command"]
    assert (f.home / "runs" / run.runId / "outputs" / "Cmd.txt").read_text() == "agent saw hello T1\n"


async def test_wait_for_is_satisfied_by_files_appearing(
    flow: Callable[..., Any], workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    polls: list[list[str]] = []  # what each poll saw, in order

    def observed(root: Path, pattern: str) -> list[str]:
        found: list[str] = matching_files(root, pattern)
        polls.append(found)
        return found

    monkeypatch.setattr(wait_module, "matching_files", observed)
    steps = """
              - {id: Wait, wait_for: {glob: "inbox/qa/*.task", timeout_sec: 20, poll_ms: 20, min_count: 2}}
              - {id: Echo, provider: echo, prompt: "got {{steps.Wait.output}}"}
    """
    f = await flow(_config(steps, within=0))
    ack, message = await f.send("go")
    run_id = run_id_for(message)
    assert ack.message.startswith(f"Started run {run_id}")
    await async_wait_until(lambda: polls)  # the first poll found nothing
    queue = workspace / "inbox" / "qa"
    queue.mkdir(parents=True)
    (queue / "b.tmp").write_text("not yet")
    (queue / "a.task").write_text("one")
    await async_wait_until(lambda: polls[-1] == ["inbox/qa/a.task"])  # one file is not min_count
    (queue / "b.tmp").rename(queue / "b.task")
    run = await f.settled(run_id)
    wait = run.steps["Wait"].model_extra or {}
    assert run.steps["Wait"].status == "completed" and run.steps["Wait"].exitCode == 0
    assert wait["files"] == ["inbox/qa/a.task", "inbox/qa/b.task"] and wait["timed_out"] is False
    assert polls[0] == [] and polls[-1] == wait["files"]
    assert wait["poll_count"] == len(polls) >= 3 and wait["wait_duration_ms"] > 0
    assert f.outbox.payloads[-1].message == 'got ["inbox/qa/a.task", "inbox/qa/b.task"]'


async def test_wait_for_timeout_exits_124_with_the_state_fields(flow: Callable[..., Any]) -> None:
    steps = """
              - {id: Wait, wait_for: {glob: "nothing/*.task", timeout_sec: 0.3, poll_ms: 50}}
    """
    f = await flow(_config(steps))
    answer, message = await f.send("go")
    run = f.run(run_id_for(message))
    step = run.steps["Wait"]
    extra = step.model_extra or {}
    assert run.state == "failed_final" and step.status == "failed" and step.exitCode == 124
    assert extra["timed_out"] is True and extra["files"] == [] and extra["poll_count"] >= 2
    assert extra["wait_duration_ms"] >= 300
    assert "failed at step Wait: wait_for nothing/*.task: timed out after 0.3s" in answer.message


async def test_wait_for_keeps_its_deadline_across_a_restart(
    flow: Callable[..., Any], start: Callable[..., Any], make_context: Callable[..., Any],
) -> None:
    steps = """
              - {id: Wait, wait_for: {glob: "nothing/*.task", timeout_sec: 30, poll_ms: 20}}
    """
    f = await flow(_config(steps, within=0))
    _, message = await f.send("go")
    run_id = run_id_for(message)
    await async_wait_until(lambda: (f.run(run_id).steps["Wait"].model_extra or {}).get("waitSince"))
    await f.orchestrator.stop()
    run = f.run(run_id)
    assert run.state == "queued"
    since = (run.steps["Wait"].model_extra or {})["waitSince"]
    f.store.update_step(run, "Wait", waitSince=since - 60)  # the gateway was down for a minute
    await start(make_context())
    run = await f.settled(run_id)
    extra = run.steps["Wait"].model_extra or {}
    assert run.state == "failed_final" and run.steps["Wait"].exitCode == 124 and extra["timed_out"] is True
    assert extra["poll_count"] == 1 and extra["wait_duration_ms"] >= 60_000


async def test_for_each_with_one_failing_item_fails_the_step_and_keeps_every_result(
    flow: Callable[..., Any],
) -> None:
    steps = f"""
              - {{id: Plan, provider: echo, prompt: '["ok-1", "bad-2", "ok-3"]'}}
              - id: Each
                for_each: {{items: "{{{{steps.Plan.output}}}}"}}
                do: {{command: [{PY}, -c, "{ITEM_CMD}", "{{{{item}}}}"]}}
    """
    f = await flow(_config(steps))
    answer, message = await f.send("go")
    run = f.run(run_id_for(message))
    items = (run.steps["Each"].model_extra or {})["items"]
    assert [(i["item"], i["status"], i["exitCode"]) for i in items] == [
        ("ok-1", "completed", 0), ("bad-2", "failed", 3), ("ok-3", "completed", 0)]
    assert items[0]["output"] == "did ok-1" and "exited with code 3" in items[1]["error"]
    assert run.steps["Each"].status == "failed" and run.state == "failed_final"
    assert "1 of 3 item(s) failed; item 'bad-2'" in answer.message


# Each item marks itself started and running, records how many items run beside it, then waits (at
# most 20 s) until two items have started: with fewer than two in parallel the first item waits alone.
# The first two then stay up to 1 s more, until a third starts: that happens early only above parallel 2.
BARRIER_SCRIPT = """
import os, sys, time
item, base = sys.argv[1], sys.argv[2]
started, running = os.path.join(base, "started"), os.path.join(base, "running")
open(os.path.join(started, item), "w").close()
open(os.path.join(running, item), "w").close()
peers = len(os.listdir(running))
deadline = time.monotonic() + 20
while len(os.listdir(started)) < 2 and time.monotonic() < deadline:
    time.sleep(0.01)
alone = len(os.listdir(started)) < 2
hold = time.monotonic() + 1  # room for a third item to start if more than two may run at once
while len(os.listdir(started)) < 3 and time.monotonic() < hold:
    time.sleep(0.01)
os.remove(os.path.join(running, item))
print(item.upper(), peers, "alone" if alone else "together")
"""


async def test_for_each_items_from_the_run_input_run_in_parallel(
    flow: Callable[..., Any], selector: ScriptedSelector, tmp_path: Path
) -> None:
    for folder in ("started", "running"):
        (tmp_path / folder).mkdir()
    script = tmp_path / "item.py"
    script.write_text(BARRIER_SCRIPT)
    steps = f"""
              - id: Each
                for_each: {{items: "{{{{input.names}}}}", parallel: 2}}
                do: {{command: [{PY}, "{script}", "{{{{item}}}}", "{tmp_path}"]}}
    """
    selector.answer({"action": "workflow_start", "workflowId": "w", "input": {"names": ["a", "b", "c", "d"]}})
    f = await flow(_config(steps, head="selector: {provider: sel}"), providers={"sel": selector.provider})
    answer, message = await f.send("go")
    outputs = [line.split() for line in json.loads(answer.message)]
    assert [name for name, _, _ in outputs] == ["A", "B", "C", "D"]
    assert all(together == "together" for _, _, together in outputs), "an item ran alone: not parallel"
    assert max(int(peers) for _, peers, _ in outputs) == 2, "more than `parallel` items ran at once"


async def test_for_each_glob_moves_items_only_when_opted_in(flow: Callable[..., Any], workspace: Path) -> None:
    queue = workspace / "inbox" / "eng"
    queue.mkdir(parents=True)
    for name in ("1-ok.task", "2-bad.task", "3-ok.task"):
        (queue / name).write_text(name)
    steps = f"""
              - id: Each
                for_each: {{glob: "inbox/eng/*.task", on_item_complete: {{}}}}
                do: {{command: [{PY}, -c, "{ITEM_CMD}", "{{{{item}}}}"]}}
    """
    f = await flow(_config(steps, head="version: 1.2\nmax_retries: 3\nretry_backoff_sec: 0"))
    _, message = await f.send("go")
    run = f.run(run_id_for(message))
    stamp = run.createdAt[:19].replace("-", "").replace(":", "").replace("T", "-")
    items = (run.steps["Each"].model_extra or {})["items"]
    assert [i["moved_to"] for i in items] == [f"processed/{stamp}/1-ok.task", f"failed/{stamp}/2-bad.task",
                                             f"processed/{stamp}/3-ok.task"]
    assert sorted(os.listdir(workspace / "processed" / stamp)) == ["1-ok.task", "3-ok.task"]
    assert os.listdir(queue) == []
    assert run.state == "failed_final" and run.job.retries == 0 and run.job.failure_category == "fatal"


async def test_without_opt_in_task_files_stay_where_they_are(flow: Callable[..., Any], workspace: Path) -> None:
    (workspace / "inbox" / "eng").mkdir(parents=True)
    (workspace / "inbox" / "eng" / "x.task").write_text("x")
    steps = f"""
              - id: Each
                for_each: {{glob: "inbox/eng/*.task"}}
                do: {{command: [{PY}, -c, "print(open('{{{{item}}}}').read())"]}}
    """
    f = await flow(_config(steps))
    answer, _ = await f.send("go")
    assert json.loads(answer.message) == ["x"]
    assert (workspace / "inbox" / "eng" / "x.task").exists()


async def test_input_pauses_the_run_and_the_next_message_resumes_it(flow: Callable[..., Any]) -> None:
    steps = f"""
              - {{id: Ask, input: {{prompt: "Which branch for {{{{message}}}}?"}}}}
              - {{id: Build, command: [{PY}, -c, "import sys; print('building', sys.argv[1])",
                                      "{{{{steps.Ask.output}}}}"]}}
    """
    f = await flow(_config(steps))
    question, message = await f.send("deploy")
    run_id = run_id_for(message)
    assert question.message.startswith("Which branch for deploy?")
    assert (question.workflowRunId, question.workflowStepId) == (run_id, "Ask")
    run = f.run(run_id)
    assert run.state == "waiting_input" and run.steps["Ask"].status == "waiting"
    status, _ = await f.send("/status")
    assert "waiting_input, step 1/2 Ask" in status.message and "waiting for your answer" in status.message
    answer, reply_to = await f.send("main")
    assert answer.message == "building main" and answer.messageId == reply_to.messageId
    run = f.run(run_id)
    assert run.state == "done" and run.steps["Ask"].output == "main" and f.outbox.payloads == []
    events = [e["event"] for e in f.job_events(run_id)]
    assert events == ["job.created", "job.running", "job.waiting_input", "job.requeued", "job.running",
                      "job.succeeded"]


async def test_a_pushed_question_is_answered_through_its_run_id(flow: Callable[..., Any]) -> None:
    steps = """
              - {id: Ask, input: {prompt: "Sure?"}}
              - {id: Echo, provider: echo, prompt: "answer was {{steps.Ask.output}}"}
    """
    f = await flow(_config(steps, within=0))
    _, message = await f.send("go")
    run_id = run_id_for(message)
    await async_wait_until(lambda: f.outbox.payloads)
    [asked] = f.outbox.payloads
    assert asked.message.startswith("Sure?") and asked.workflowRunId == run_id
    refused, _ = await f.send("yes", workflowRunId=run_id, conversationId="elsewhere")
    assert refused.message == f"no workflow run {run_id!r} found", "a run is reachable only from its conversation"
    ack, _ = await f.send("yes", workflowRunId=run_id)
    assert ack.message.startswith(f"Resumed run {run_id}")
    run = await f.settled(run_id)
    assert f.outbox.payloads[-1].message == "answer was yes" and run.delivery == "push"


async def test_steps_get_the_handoff_of_the_previous_agent(
    flow: Callable[..., Any], script: Callable[[str, str], list[str]], home: Any
) -> None:
    reader = script("handoff_reader", """
        import json, os, sys
        sys.stdin.read()
        print(json.load(open(os.environ["SWITCHYARD_HANDOFF"]))["from_agent"])
    """)
    config = """
        reply_within_sec: 10
        agents:
          first: {provider: echo, prompt: '{"summary": "planned it", "key_findings": ["k1"]}'}
          second: {provider: reader}
        workflows: {w: {steps: [{id: Plan, agent: first}, {id: Do, agent: second}]}}
        rules: {default_workflow: w}
    """
    f = await flow(config, providers={"reader": ProviderSettings(command=reader)})
    answer, message = await f.send("go")
    assert answer.message == "first"
    run = f.run(run_id_for(message))
    handoff = Path((run.steps["Plan"].model_extra or {})["handoffPath"])
    assert handoff.parent == home.coordination / "handoffs" and not handoff.exists()
    [report] = [r for r in _completed(home) if r["task_id"] == run.runId]
    assert report["handoff_context"]["summary"] == "first"


def _completed(home: Any) -> list[dict[str, Any]]:
    lines = (home.coordination / "completed.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]
