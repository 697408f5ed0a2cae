"""A chat user reaches only their own conversation: diagnostics and cancel_run never see or touch another's run."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gateway.settings import ProviderSettings
from gateway.telemetry.events import EventLog
from gateway.testing import async_wait_until
from tests.fakes.orchestrator import Flow, ScriptedSelector, make_message

SECRET = "ALICE-SECRET-4711"
FAIL = f"""
    import sys
    sys.stdin.read()
    sys.stderr.write("cannot reach the bank for {SECRET}\\n")
    sys.exit(3)
"""
SLOW = """
    import os, sys, time
    sys.stdin.read()
    deadline = time.monotonic() + 60
    while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
        time.sleep(0.05)
    print("slow done")
"""
DIAG = """
    import os, sys
    prompt = sys.stdin.read()
    with open(sys.argv[1], "a") as seen:
        seen.write(prompt + open(os.environ["SWITCHYARD_REQUEST"]).read() + "\\n----\\n")
    print("Findings: see the context.")
"""
CONFIG = """
    selector: {provider: sel}
    diagnostics: {provider: diag}
    reply_within_sec: 0.2
    agents: {failing: {provider: fail}, slow: {provider: slow}}
    workflows:
      pay: {description: Pay, steps: [{id: Pay, agent: failing}]}
      wait: {description: Wait, steps: [{id: Wait, agent: slow}]}
"""
ALICE = {"conversationId": "alice-chat", "senderId": "alice", "sender": "Alice"}
BOB = {"conversationId": "bob-chat", "senderId": "bob", "sender": "Bob"}


async def _flow(
    tmp_path: Path, script: Callable[..., list[str]], selector: ScriptedSelector, flow: Callable[..., Any]
) -> Flow:
    providers = {"sel": selector.provider, "fail": ProviderSettings(command=script("fail", FAIL)),
                 "slow": ProviderSettings(command=[*script("slow", SLOW), str(tmp_path / "release")]),
                 "diag": ProviderSettings(command=[*script("diag", DIAG), str(tmp_path / "diag_seen.txt")])}
    started: Flow = await flow(CONFIG, providers)
    return started


async def _ask(flow: Flow, selector: ScriptedSelector, decision: dict[str, Any], **fields: Any) -> str:
    selector.answer(decision)
    answer, _ = await flow.send("why didn't you answer?", **fields)
    return answer.message


async def test_diagnostics_sees_only_the_asking_conversation(
    tmp_path: Path, script: Callable[..., list[str]], selector: ScriptedSelector, flow: Callable[..., Any],
    events: EventLog,
) -> None:
    f = await _flow(tmp_path, script, selector, flow)
    selector.answer({"action": "workflow_start", "workflowId": "pay"})
    started, alice_message = await f.send(f"pay my rent, pin {SECRET}", **ALICE)
    run_id = started.workflowRunId or ""
    run = await f.settled(run_id)
    assert run.state == "failed_final" and SECRET in (run.error or "")
    # what the worker writes when it gives up on a message of Alice's (its reason quotes her text)
    events.emit("job.failed.final", job_id="console_m1.json", state="failed_final", kind="message",
                channel="console", profile="console", conversation="alice-chat",
                reason=f"failed 5 time(s); last error: while handling 'pay my rent, pin {SECRET}'")
    seen = tmp_path / "diag_seen.txt"

    diagnose = {"action": "diagnostics_investigate", "question": "why no answer?"}
    assert await _ask(f, selector, diagnose, **BOB) == "Findings: see the context."
    bob_saw = seen.read_text()
    assert SECRET not in bob_saw and run_id not in bob_saw
    assert '"incoming": 2' in bob_saw  # the global queue depths (numbers only) are still there

    seen.unlink()
    await _ask(f, selector, diagnose, **ALICE)
    alice_saw = seen.read_text()
    assert alice_saw.count(SECRET) >= 3  # her run's stderr tail and error, and the worker's event
    assert alice_message.conversation == "alice-chat"


async def test_cancel_run_reaches_only_the_asking_conversations_runs(
    tmp_path: Path, script: Callable[..., list[str]], selector: ScriptedSelector, flow: Callable[..., Any],
) -> None:
    f = await _flow(tmp_path, script, selector, flow)
    selector.answer({"action": "workflow_start", "workflowId": "wait"})
    started, _ = await f.send("wait for me", **ALICE)
    run_id = started.workflowRunId or ""
    await async_wait_until(lambda: f.run(run_id).state == "running", 10)

    cancel = {"action": "command_invoke", "function": "cancel_run", "arguments": {"runId": run_id}}
    unknown = {"action": "command_invoke", "function": "cancel_run", "arguments": {"runId": "r-nope"}}
    assert await _ask(f, selector, unknown, **BOB) == "no workflow run 'r-nope' found"
    assert await _ask(f, selector, cancel, **BOB) == f"no workflow run {run_id!r} found"
    [answer] = await f.orchestrator.handle(make_message("/cancel", **BOB))
    assert answer.message == "Nothing is running."
    assert f.run(run_id).state == "running"
    assert not any(e.get("event") == "job.cancelled" for e in f.job_events(run_id))

    assert await _ask(f, selector, cancel, **ALICE) == f"Cancelled run {run_id} (workflow wait)."
    assert f.run(run_id).state == "cancelled"


def test_lifecycle_events_carry_the_profile(tmp_path: Path) -> None:
    """The profile lets diagnostics tell apart two bots of one channel that share a conversation id."""
    from gateway.home import Home
    from gateway.telemetry.events import read_events
    from orchestrator.chat.diagnostics import gather_context

    home = Home(tmp_path / "h")
    home.create()
    log = EventLog(home.events_file)
    log.emit("job.failed.final", job_id="x", channel="console", profile="other-bot", conversation="c1",
             reason=SECRET)
    log.emit("job.failed.final", job_id="y", channel="console", profile="console", conversation="c1",
             reason="mine")
    log.emit("provider.missing", reason="`claude` is not on PATH")
    log.close()
    assert len(read_events(home.events_file)) == 3
    context = gather_context(home.events_file, None, make_message("why?", conversationId="c1"), dict)
    assert [e["reason"] for e in context["events"]] == ["mine", "`claude` is not on PATH"]
    assert json.dumps(context).count(SECRET) == 0



async def test_cancel_run_of_an_unreadable_run_is_an_unknown_id(tmp_path: Path) -> None:
    """A run whose state.json is not a run stands in with no message: cancel_run answers it as unknown
    instead of failing the asking message (which the queue would retry in vain)."""
    from gateway.home import Home
    from orchestrator.chat.functions import FunctionRegistry, builtin_functions
    from orchestrator.config.loading import LoadedConfig, default_orchestrator_config
    from orchestrator.storage.files.runs import RunStore

    home = Home(tmp_path / "h")
    home.create()
    store = RunStore(home, fsync=False)
    folder = store.made(store.folder("r-broken"))
    (folder / "state.json").write_text('{"runId": "r-broken", "message": 7}')
    assert store.quarantine("r-broken", "its state.json is not a run") is not None
    loaded = LoadedConfig("o", tmp_path, default_orchestrator_config({"rules", "echo", "demo"}))
    registry = FunctionRegistry(builtin_functions(loaded, store, None, dict))  # type: ignore[arg-type]
    answer = await registry.invoke("cancel_run", {"runId": "r-broken"}, make_message("cancel r-broken"))
    assert answer == "no workflow run 'r-broken' found"
