"""orchestrator/chat/diagnostics.py: bounded context to the diagnostics agent, findings back, nothing advanced."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gateway.api import HandlerContext
from gateway.home import Home
from gateway.settings import ProviderSettings
from gateway.telemetry.events import EventLog
from orchestrator.chat.diagnostics import CONTEXT_CAP, gather_context
from orchestrator.runs.state import Conversation, RunState, StepState, conversation_key
from orchestrator.storage.files.runs import RunStore
from tests.fakes.orchestrator import ScriptedSelector, make_message

DIAG = """
    import json, os, sys
    prompt = sys.stdin.read()
    request = json.load(open(os.environ["SWITCHYARD_REQUEST"]))
    json.dump({"prompt_bytes": len(prompt.encode()), "request": request}, open(sys.argv[1], "w"))
    print("Findings: step Test failed because the token expired.\\nNext steps: renew the token, then retry.")
"""


def _failed_run(home: Home, stderr: str = "token expired") -> RunState:
    message = make_message("build", conversationId="c1")
    run = RunState(runId="r-a", workflowId="build", orchestratorId="main", state="running", currentStep="Test",
                   message=message.model_dump(mode="json"), conversation=Conversation(channel="console"),
                   steps={"Plan": StepState(status="completed", output="p" * 50_000),
                          "Test": StepState(status="failed", exitCode=2, error="Test exited with code 2",
                                            stderrTail=stderr)})
    return RunStore(home, fsync=False).create(run, conversation_key(message))


def test_context_is_bounded_and_keeps_the_newest_events(home: Home, events: EventLog) -> None:
    run = _failed_run(home, stderr="E" * 100_000)
    for number in range(400):
        events.emit("job.failed.retryable", job_id="r-a", reason=f"attempt {number} " + "x" * 3000)
    context = gather_context(home.events_file, run, make_message("why?"), lambda: {"incoming": 7})
    assert len(json.dumps(context, ensure_ascii=False).encode()) <= CONTEXT_CAP
    assert context["queue"] == {"incoming": 7}
    assert context["run"]["steps"]["Test"]["stderrTail"].endswith("E" * 100)
    assert context["events"][-1]["reason"].startswith("attempt 399 ")
    assert len(context["events"]) >= 3


def test_context_survives_failing_queue_stats(home: Home) -> None:
    def broken() -> dict[str, Any]:
        raise OSError("disk gone")

    context = gather_context(home.events_file, None, make_message("why?"), broken)
    assert context["run"] is None and "disk gone" in context["queue"]["error"]


async def test_diagnostics_agent_gets_bounded_context_and_advances_nothing(
    home: Home, tmp_path: Path, script: Callable[..., Any], selector: ScriptedSelector,
    make_context: Callable[..., HandlerContext], write_config: Callable[[str], Path], start: Callable[..., Any],
) -> None:
    write_config("selector: {provider: sel}\ndiagnostics: {provider: diag}\n")
    seen = tmp_path / "seen.json"
    diag = ProviderSettings(command=[*script("diag", DIAG), str(seen)])
    orchestrator = await start(make_context({"sel": selector.provider, "diag": diag}))
    _failed_run(home)
    before = (home.runs / "r-a" / "state.json").read_bytes()
    selector.answer({"action": "diagnostics_investigate", "question": "why did the build fail?"})
    [answer] = await orchestrator.handle(make_message("why did it fail?", conversationId="c1"))
    assert answer.agent == "diagnostics" and answer.workflowRunId == "r-a"
    assert answer.message.startswith("Findings: step Test failed") and "Next steps:" in answer.message
    recorded = json.loads(seen.read_text())
    request = recorded["request"]
    assert request["question"] == "why did the build fail?"
    assert request["message"]["message"] == "why did it fail?"
    assert request["context"]["run"]["steps"]["Test"]["stderrTail"] == "token expired"
    assert request["context"]["queue"] == {"incoming": 2, "processing": 1}
    assert recorded["prompt_bytes"] < CONTEXT_CAP + 4096
    assert (home.runs / "r-a" / "state.json").read_bytes() == before


async def test_builtin_rules_diagnostics_answer_findings_and_options(
    home: Home, make_context: Callable[..., HandlerContext], start: Callable[..., Any]
) -> None:
    orchestrator = await start(make_context())
    _failed_run(home)
    [answer] = await orchestrator.handle(make_message("/diagnose the build", conversationId="c1"))
    assert answer.agent == "diagnostics"
    assert "Run r-a (workflow build) is running, at step Test." in answer.message
    assert "Step Test failed (exit 2): Test exited with code 2" in answer.message
    assert "Queue: incoming 2, processing 1" in answer.message
    assert "Next steps:" in answer.message and "/cancel" in answer.message
