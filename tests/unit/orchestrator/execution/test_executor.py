"""orchestrator/execution/executor.py: runs in the background, result as reply or push (exactly once), resume,
cancel."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.api import HandlerContext
from gateway.home import Home
from gateway.outbox import outgoing_name
from gateway.settings import ProviderSettings
from gateway.telemetry.events import read_events
from gateway.testing import async_wait_until
from orchestrator import Orchestrator
from orchestrator.runs.state import RunState, run_id_for
from orchestrator.storage.files.runs import RunStore
from tests.fakes.orchestrator import FakeOutbox, ScriptedSelector, make_message
from tests.fakes.stores import orchestrator_for
from tests.process import pid_alive

GATED = """
    import os, sys, time
    prompt = sys.stdin.read()
    calls, gate = sys.argv[1], sys.argv[2]
    with open(calls, "a") as handle:
        handle.write(os.environ["SWITCHYARD_STEP_ID"] + " " + os.environ["SWITCHYARD_RUN_ID"] + "\\n")
    with open(calls + ".pid", "w") as handle:
        handle.write(str(os.getpid()))
    while not os.path.exists(gate):
        time.sleep(0.01)
    print("planned: " + prompt)
"""
TEST_CMD = "import sys; print('tested', sys.argv[1]); sys.exit(int(sys.argv[2]))"


def config(within: float, exit_code: int = 0) -> str:
    return f"""
        selector: {{provider: sel}}
        reply_within_sec: {within}
        agents: {{planner: {{provider: gated, prompt: "Plan for: {{{{message}}}}"}}}}
        workflows:
          build:
            description: Build the project
            inputs: {{type: object, properties: {{flag: {{type: boolean}}}}, additionalProperties: false}}
            steps:
              - {{id: Plan, agent: planner}}
              - {{id: Test, command: [{json.dumps(sys.executable)}, -c, {json.dumps(TEST_CMD)},
                                     "{{{{steps.Plan.output}}}}", "{exit_code}"]}}
    """


class Rig:
    """An orchestrator with a scripted selector and a gated provider the test releases."""

    def __init__(self, tmp_path: Path, home: Home, outbox: FakeOutbox, selector: ScriptedSelector,
                 context: HandlerContext):
        self.calls = tmp_path / "calls.txt"
        self.gate = tmp_path / "gate"
        self.home = home
        self.outbox = outbox
        self.selector = selector
        self.context = context
        self.store = RunStore(home, fsync=False)

    def call_lines(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []

    def state(self, run_id: str) -> RunState:
        run = self.store.load(run_id)
        assert run is not None
        return run


@pytest.fixture
def rig(
    tmp_path: Path, home: Home, outbox: FakeOutbox, selector: ScriptedSelector, script: Callable[..., Any],
    make_context: Callable[..., HandlerContext],
) -> Rig:
    argv = script("gated", GATED)
    calls, gate = tmp_path / "calls.txt", tmp_path / "gate"
    gated = ProviderSettings(command=[*argv, str(calls), str(gate)], timeout_sec=60)
    context = make_context({"sel": selector.provider, "gated": gated})
    selector.answer({"action": "workflow_start", "workflowId": "build", "input": {}})
    return Rig(tmp_path, home, outbox, selector, context)


async def test_fast_run_result_is_the_reply(
    rig: Rig, write_config: Callable[[str], Path], start: Callable[..., Any]
) -> None:
    write_config(config(within=30))
    rig.gate.touch()
    orchestrator = await start(rig.context)
    message = make_message("build it")
    [answer] = await orchestrator.handle(message)
    run_id = run_id_for(message)
    assert answer.message == "tested planned: Plan for: build it"
    assert (answer.agent, answer.workflowRunId, answer.workflowStepId) == ("Test", run_id, "Test")
    assert answer.messageId == message.messageId
    assert rig.outbox.payloads == []
    run = rig.state(run_id)
    assert run.state == "done" and run.delivery == "reply"
    assert [run.steps["Plan"].status, run.steps["Test"].status] == ["completed", "completed"]
    assert run.steps["Plan"].output == "planned: Plan for: build it\n"
    jobs = [(e["event"], e["state"]) for e in read_events(rig.home.events_file)
            if e.get("job_id") == run_id and e["event"].startswith("job.")]
    assert jobs == [("job.created", "queued"), ("job.running", "running"), ("job.succeeded", "done")]


async def test_slow_run_is_acknowledged_then_pushed_once(
    rig: Rig, write_config: Callable[[str], Path], start: Callable[..., Any]
) -> None:
    write_config(config(within=0.2))
    orchestrator = await start(rig.context)
    message = make_message("build it")
    [ack] = await orchestrator.handle(message)
    run_id = run_id_for(message)
    assert ack.message.startswith(f"Started run {run_id} (workflow build)")
    assert ack.workflowRunId == run_id and ack.agent == "selector"
    assert rig.outbox.payloads == []
    rig.gate.touch()
    await async_wait_until(lambda: rig.state(run_id).delivery)
    [pushed] = rig.outbox.payloads
    assert pushed.message == "tested planned: Plan for: build it"
    assert (pushed.workflowRunId, pushed.workflowStepId, pushed.agent) == (run_id, "Test", "Test")
    assert (pushed.channel, pushed.conversationId, pushed.messageId) == ("console", "c1", message.messageId)
    assert rig.state(run_id).delivery == "push"


async def test_status_while_running_calls_no_provider(
    rig: Rig, write_config: Callable[[str], Path], start: Callable[..., Any]
) -> None:
    write_config(config(within=0))
    orchestrator = await start(rig.context)
    message = make_message("build it")
    await orchestrator.handle(message)
    await async_wait_until(rig.call_lines)
    calls = rig.selector.calls
    [status] = await orchestrator.handle(make_message("/status"))
    run_id = run_id_for(message)
    head, *lines = status.message.splitlines()
    assert head.startswith(f"Run {run_id} (workflow build): running, step 1/2 Plan, elapsed ")
    assert lines[:2] == ["  ▶ Plan", "  · Test"] and lines[2].startswith("Last event: step.running Plan")
    assert status.workflowRunId == run_id and status.workflowStepId == "Plan"
    assert rig.selector.calls == calls
    rig.gate.touch()


async def test_retried_message_reattaches_to_its_run(
    rig: Rig, write_config: Callable[[str], Path], start: Callable[..., Any]
) -> None:
    write_config(config(within=0))
    orchestrator = await start(rig.context)
    message = make_message("build it")
    [first] = await orchestrator.handle(message)
    await async_wait_until(rig.call_lines)
    [second] = await orchestrator.handle(message.model_copy())
    assert first.workflowRunId == second.workflowRunId == run_id_for(message)
    rig.gate.touch()
    await async_wait_until(lambda: rig.state(run_id_for(message)).delivery)
    assert len(rig.call_lines()) == 1
    assert [p.name for p in rig.home.runs.iterdir() if p.is_dir()] == [run_id_for(message)]
    assert await orchestrator.handle(message.model_copy()) == []  # the pushed result was its answer
    assert len(rig.outbox.payloads) == 1


async def test_retry_after_a_crash_reattaches_in_a_new_process(
    rig: Rig, write_config: Callable[[str], Path], start: Callable[..., Any]
) -> None:
    write_config(config(within=0))
    first = orchestrator_for(rig.context)
    await first.start()
    message = make_message("build it")
    await first.handle(message)
    await async_wait_until(rig.call_lines)
    await first.stop()
    assert rig.state(run_id_for(message)).state == "queued"
    rig.gate.touch()
    write_config(config(within=30))
    second = await start(rig.context)
    [answer] = await second.handle(message)
    assert answer.message.startswith("tested planned") and answer.workflowRunId == run_id_for(message)
    assert len([p for p in rig.home.runs.iterdir() if p.is_dir()]) == 1
    assert rig.outbox.payloads == []


async def test_a_run_that_finished_before_its_message_was_retried_answers_once(
    rig: Rig, write_config: Callable[[str], Path], start: Callable[..., Any]
) -> None:
    """The gateway died while the message waited for its run; after the restart the resumed run
    ends before the message is handled again, so its result is pushed: the retry adds nothing."""
    write_config(config(within=0))
    first = orchestrator_for(rig.context)
    await first.start()
    message = make_message("build it")
    await first.handle(message)  # the crash: this reply is never written, the message is retried
    await async_wait_until(rig.call_lines)
    await first.stop()
    rig.gate.touch()
    write_config(config(within=30))
    second = await start(rig.context)
    await async_wait_until(lambda: rig.state(run_id_for(message)).delivery)
    replies = await second.handle(message.model_copy())
    heard = [payload.message for payload in [*rig.outbox.payloads, *replies]]
    assert len(heard) == 1 and heard[0].startswith("tested planned")
    [why] = [e for e in read_events(rig.context.events.path) if e["event"] == "message.already_answered"]
    assert why["job_id"] == run_id_for(message) and why["messageId"] == message.messageId


async def test_a_result_pushed_just_before_a_crash_is_not_pushed_again(
    rig: Rig, write_config: Callable[[str], Path], start: Callable[..., Any]
) -> None:
    """The process died between writing the result into the outbox and recording `delivery: push`."""
    write_config(config(within=0))
    first = await start(rig.context)
    message = make_message("build it")
    await first.handle(message)
    rig.gate.touch()
    run = await async_wait_until(lambda: (found := rig.state(run_id_for(message))).delivery and found)
    await first.stop()
    [pushed] = rig.outbox.payloads
    (rig.home.outgoing / outgoing_name(pushed)).write_bytes(pushed.to_json())
    rig.store.save(run.model_copy(update={"delivery": None}))
    await start(rig.context)
    assert rig.outbox.payloads == [pushed]
    assert rig.state(run.runId).delivery == "push"


async def test_crash_resume_skips_completed_steps(
    rig: Rig, write_config: Callable[[str], Path], start: Callable[..., Any]
) -> None:
    write_config(config(within=30).replace("- {id: Test, command:", "- {id: Plan2, agent: planner}\n"
                                           "              - {id: Test, command:"))
    message = make_message("build it")
    run_id = run_id_for(message)
    folder = rig.home.runs / run_id
    folder.mkdir(parents=True)
    state = {
        "runId": run_id, "workflowId": "build", "orchestratorId": "main", "state": "running",
        "currentStep": "Plan2", "createdAt": "2024-01-01T00:00:00.000Z", "updatedAt": "2024-01-01T00:00:00.000Z",
        "input": {}, "message": message.model_dump(mode="json"),
        "conversation": {"channel": "console", "channelProfileId": "console", "conversationId": "c1"},
        "steps": {"Plan": {"status": "completed", "output": "old plan"}, "Plan2": {"status": "running"},
                  "Test": {"status": "pending"}},
    }
    (folder / "state.json").write_text(json.dumps(state))
    rig.gate.touch()
    await start(rig.context)
    await async_wait_until(lambda: rig.state(run_id).delivery)
    assert [line.split()[0] for line in rig.call_lines()] == ["Plan2"]
    run = rig.state(run_id)
    assert run.state == "done" and run.steps["Plan"].output == "old plan"
    [pushed] = rig.outbox.payloads
    assert pushed.message == "tested old plan" and pushed.workflowRunId == run_id


async def test_failed_step_fails_the_run_with_a_clear_reply(
    rig: Rig, write_config: Callable[[str], Path], start: Callable[..., Any]
) -> None:
    write_config(config(within=30, exit_code=2))
    rig.gate.touch()
    orchestrator = await start(rig.context)
    message = make_message("build it")
    [answer] = await orchestrator.handle(message)
    run_id = run_id_for(message)
    assert answer.message.startswith(f"Run {run_id} (workflow build) failed at step Test: ")
    assert "exited with code 2" in answer.message
    run = rig.state(run_id)
    assert run.state == "failed_final" and run.steps["Test"].status == "failed"
    assert run.steps["Test"].exitCode == 2
    assert run.steps["Test"].output == "tested planned: Plan for: build it\n"
    final = [e for e in read_events(rig.home.events_file) if e["event"] == "job.failed.final"]
    assert final[-1]["job_id"] == run_id and "exited with code 2" in final[-1]["reason"]


async def test_cancel_stops_the_process_and_its_reply_is_the_one_answer(
    rig: Rig, write_config: Callable[[str], Path], start: Callable[..., Any]
) -> None:
    """The `/cancel` reply says the run was cancelled; the run's own "was cancelled" result is not pushed
    after it (issue 32 §16), and the run's state says so for good (`delivery: told`)."""
    write_config(config(within=0))
    orchestrator = await start(rig.context)
    message = make_message("build it")
    await orchestrator.handle(message)
    pid_file = Path(str(rig.calls) + ".pid")
    await async_wait_until(pid_file.exists)
    await async_wait_until(pid_file.read_text)
    pid = int(pid_file.read_text())
    [answer] = await orchestrator.handle(make_message("/cancel"))
    run_id = run_id_for(message)
    assert answer.message == f"Stopped. Cancelled run {run_id} (workflow build)."
    run = rig.state(run_id)
    assert run.state == "cancelled" and run.steps["Plan"].status == "failed" and run.steps["Plan"].error == "cancelled"
    await async_wait_until(lambda: not pid_alive(pid), timeout_s=5)
    assert run.delivery == "told"
    assert rig.outbox.payloads == [], "the run's result was pushed after the /cancel reply had said it"
    [again] = await orchestrator.handle(make_message("/cancel"))
    assert again.message == "Nothing is running."



async def test_unknown_workflow_is_refused_with_the_ids(
    rig: Rig, write_config: Callable[[str], Path], start: Callable[..., Any]
) -> None:
    write_config(config(within=0))
    rig.selector.answer({"action": "workflow_start", "workflowId": "deploy"})
    orchestrator = await start(rig.context)
    [answer] = await orchestrator.handle(make_message("deploy"))
    assert answer.message == "I cannot start workflow 'deploy': there is no such workflow. Workflows: build."
    assert not [p for p in rig.home.runs.iterdir() if p.is_dir()]


async def test_input_is_validated_against_the_workflow_schema(
    rig: Rig, write_config: Callable[[str], Path], start: Callable[..., Any]
) -> None:
    write_config(config(within=0))
    rig.selector.answer({"action": "workflow_start", "workflowId": "build", "input": {"flag": "yes"}})
    orchestrator = await start(rig.context)
    [answer] = await orchestrator.handle(make_message("build"))
    assert answer.message == ("I cannot start that workflow: workflow build: input 'flag' ($.flag): "
                              "'yes' is not of type 'boolean'")


async def test_a_queued_run_whose_state_turned_unreadable_ends_failed_final_and_the_next_runs(
    rig: Rig, write_config: Callable[[str], Path], running: list[Orchestrator]
) -> None:
    """Its state.json corrupted while it waited for a slot: the claim ends it failed_final (its bytes kept,
    the reason in its state) and claims the next run. Before, it was dropped from the queue unseen."""
    write_config(config(within=0))
    orchestrator = orchestrator_for(rig.context, max_parallel_runs=1)
    await orchestrator.start()
    running.append(orchestrator)
    first, second, third = (make_message(f"build {n}", conversationId=f"c{n}") for n in (1, 2, 3))
    for message in (first, second, third):
        await orchestrator.handle(message)
    await async_wait_until(lambda: rig.call_lines())  # the first runs (held at the gate); the others wait
    corrupt = b'{"runId": "' + run_id_for(second).encode() + b'", "state": "queu'
    (rig.home.runs / run_id_for(second) / "state.json").write_bytes(corrupt)
    rig.gate.touch()
    await async_wait_until(lambda: rig.state(run_id_for(third)).state == "done")
    ended = rig.state(run_id_for(second))
    assert ended.state == "failed_final" and "state.json is not a run" in (ended.error or "")
    [kept] = (rig.home.runs / run_id_for(second)).glob("state.json.unreadable-*")
    assert kept.read_bytes() == corrupt
    assert rig.state(run_id_for(first)).state == "done"
