"""The four selector actions and the status fast path, end to end, on both queue backends."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.testing import wait_until
from tests.e2e.conftest import ORCHESTRATOR, Switchyard, both_backends, provider_calls

pytestmark = [pytest.mark.e2e, both_backends]


def _slow_build(seconds: float) -> dict:
    orchestrator = json.loads(json.dumps(ORCHESTRATOR))
    orchestrator["reply_within_sec"] = 0.5
    orchestrator["workflows"]["build"]["steps"][1]["command"] = [
        "python3", "-c", f"import time; time.sleep({seconds}); print('built ok')"]
    return orchestrator


def test_workflow_start_runs_every_step_and_replies_with_the_result(switchyard: Switchyard) -> None:
    switchyard.configure()
    switchyard.start()
    switchyard.send("start build now", messageId="b1")
    reply = switchyard.reply_to("b1")[0]
    assert reply["workflowStepId"] == "Test" and reply["agent"] == "writer"
    state = switchyard.run_state(reply["workflowRunId"])
    assert state["state"] == "done"
    assert [state["steps"][s]["status"] for s in ("Plan", "Build", "Test")] == ["completed"] * 3


def test_a_slow_run_is_acknowledged_then_its_result_is_pushed(switchyard: Switchyard) -> None:
    switchyard.configure(orchestrator=_slow_build(2))
    switchyard.start()
    switchyard.send("start build slowly", messageId="b2")
    ack = switchyard.reply_to("b2")[0]
    run_id = ack["workflowRunId"]
    assert run_id in ack["message"]
    result = switchyard.reply_to("b2", count=2)[-1]
    assert result["workflowRunId"] == run_id and result["workflowStepId"] == "Test"


def _gated_build(gate: Path) -> dict:
    """A build step that runs until `gate` exists (60 s at most): a busy machine cannot end it early."""
    orchestrator = _slow_build(0)
    orchestrator["workflows"]["build"]["steps"][1]["command"] = [
        "python3", "-c", "import os, sys, time\n"
        "deadline = time.monotonic() + 60\n"
        "while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline: time.sleep(0.05)\n"
        "print('built ok')", str(gate)]
    return orchestrator


def test_status_names_the_run_without_advancing_it(switchyard: Switchyard, fake_log, tmp_path: Path) -> None:
    gate = tmp_path / "build-may-end"
    switchyard.configure(orchestrator=_gated_build(gate))
    switchyard.start()
    switchyard.send("start build slowly", messageId="b3")
    run_id = switchyard.reply_to("b3")[0]["workflowRunId"]
    wait_until(lambda: switchyard.run_state(run_id).get("currentStep") == "Build", 20)
    before = switchyard.run_state(run_id)
    calls_before = len(provider_calls(fake_log))
    switchyard.send("/status", messageId="s1", workflowRunId=run_id)
    snapshot = switchyard.reply_to("s1")[0]["message"]
    assert run_id in snapshot and "build" in snapshot and "Build" in snapshot and "running" in snapshot
    assert switchyard.run_state(run_id) == before
    assert len(provider_calls(fake_log)) == calls_before
    gate.touch()
    assert switchyard.reply_to("b3", count=2)[-1]["workflowStepId"] == "Test"  # the run goes on unharmed


def test_workflow_status_without_a_run_says_so_exactly(switchyard: Switchyard) -> None:
    switchyard.configure()
    switchyard.start()
    switchyard.send("how is it going?", messageId="w1", conversationId="fresh")
    assert switchyard.reply_to("w1")[0]["message"] == "no active workflow run found for this conversation"


def test_workflow_status_finds_the_conversations_active_run(switchyard: Switchyard) -> None:
    switchyard.configure(orchestrator=_slow_build(3))
    switchyard.start()
    switchyard.send("start build slowly", messageId="b4", conversationId="busy")
    run_id = switchyard.reply_to("b4")[0]["workflowRunId"]
    switchyard.send("how is it going?", messageId="w2", conversationId="busy")
    assert run_id in switchyard.reply_to("w2")[0]["message"]


def test_diagnostics_investigate_answers_with_findings(switchyard: Switchyard) -> None:
    switchyard.configure()
    switchyard.start()
    switchyard.send("diagnose why nothing happens", messageId="d1")
    answer = switchyard.reply_to("d1")[0]["message"]
    assert "Findings" in answer and "Next steps" in answer


def test_command_invoke_built_in_and_declared_functions(switchyard: Switchyard) -> None:
    switchyard.configure()
    switchyard.start()
    switchyard.send("call list_workflows {}", messageId="f1")
    listing = switchyard.reply_to("f1")[0]["message"]
    assert "chat" in listing and "build" in listing
    switchyard.send('call shout {"word": "quiet"}', messageId="f2")
    assert "QUIET" in switchyard.reply_to("f2")[0]["message"]
    switchyard.send("call queue_stats {}", messageId="f3")
    assert "incoming" in switchyard.reply_to("f3")[0]["message"]


def test_command_invoke_refuses_unknown_functions_and_bad_arguments(switchyard: Switchyard) -> None:
    switchyard.configure()
    switchyard.start()
    switchyard.send("call rm_rf {}", messageId="x1")
    assert "rm_rf" in switchyard.reply_to("x1")[0]["message"]
    switchyard.send('call shout {"word": 5}', messageId="x2")
    assert "word" in switchyard.reply_to("x2")[0]["message"]


def test_unparseable_selector_output_gets_a_clear_reply(switchyard: Switchyard) -> None:
    switchyard.configure()
    switchyard.start()
    switchyard.send("garbage", messageId="g1")
    assert "selector" in switchyard.reply_to("g1")[0]["message"].lower()


def test_unknown_workflow_is_refused_by_name(switchyard: Switchyard) -> None:
    switchyard.configure()
    switchyard.start()
    switchyard.send("start deploy_everything", messageId="u1")
    assert "deploy_everything" in switchyard.reply_to("u1")[0]["message"]
