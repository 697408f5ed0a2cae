"""`/stop` in the orchestrator: it stops what runs for its conversation now (a step's built-in provider, the
diagnostics agent), the stopped work ends cancelled or unanswered, never retried, and another conversation's
work goes on."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gateway.api import HandlerContext
from gateway.home import Home
from gateway.settings import ProviderSettings
from gateway.telemetry.events import read_events
from gateway.testing import async_wait_until
from orchestrator.runs.state import run_id_for
from orchestrator.storage.files.runs import RunStore
from tests.fakes.orchestrator import ScriptedSelector, make_message

STOPPED_TURN = "Stopped. The agent that was working on your message is stopped."
CONFIG = """
    selector: {provider: sel}
    diagnostics: {provider: rules}
    reply_within_sec: 30
    agents: {a: {provider: slow}}
    workflows:
      w: {description: Waits, steps: [{id: Think, agent: a}]}
"""


class Blocking:
    """A built-in provider that answers only when told to; counts its calls, per conversation."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.release = asyncio.Event()

    async def __call__(self, prompt: str, request: dict[str, Any]) -> str:
        self.calls.append(str(request.get("message", {}).get("conversationId")))
        await self.release.wait()
        return f"answered {prompt}"


async def test_stop_cancels_a_waiting_messages_run_whose_builtin_step_runs_and_spares_other_conversations(
    home: Home, selector: ScriptedSelector, make_context: Callable[..., HandlerContext],
    write_config: Callable[[str], Path], start: Callable[..., Any],
) -> None:
    write_config(CONFIG)
    selector.answer({"action": "workflow_start", "workflowId": "w"})
    slow = Blocking()
    orchestrator = await start(make_context({"sel": selector.provider}, builtin_providers={"slow": slow}))
    go = make_message("go", conversationId="c1")
    elsewhere = make_message("go too", conversationId="c2")
    first = asyncio.create_task(orchestrator.handle(go))
    other = asyncio.create_task(orchestrator.handle(elsewhere))
    await async_wait_until(lambda: sorted(slow.calls) == ["c1", "c2"])

    [answer] = await orchestrator.handle(make_message("/stop", conversationId="c1"))
    run_id = run_id_for(go)
    assert answer.message == f"Stopped. Cancelled run {run_id} (workflow w)."
    assert answer.workflowRunId == run_id
    assert await asyncio.wait_for(first, 5) == [], "the waiting message was answered too: a second reply"
    run = RunStore(home, fsync=False).load(run_id)
    assert run is not None and run.state == "cancelled" and run.steps["Think"].error == "cancelled"
    assert run.delivery == "told"
    assert not other.done(), "the other conversation's turn was stopped too"
    slow.release.set()
    [done] = await asyncio.wait_for(other, 5)
    assert done.message == "answered go too"
    assert slow.calls == ["c1", "c2"] or slow.calls == ["c2", "c1"], "the stopped step was retried"
    stopped = [e for e in read_events(home.events_file) if e["event"] == "turn.stopped"]
    assert [(e["conversation"], e["turns"]) for e in stopped] == [("c1", 1)]


async def test_stop_ends_a_diagnostics_turn_and_its_message_goes_unanswered(
    selector: ScriptedSelector, make_context: Callable[..., HandlerContext], tmp_path: Path,
    write_config: Callable[[str], Path], start: Callable[..., Any], script: Callable[[str, str], list[str]],
) -> None:
    write_config(CONFIG.replace("{provider: rules}", "{provider: diag}"))
    started = tmp_path / "diagnostics-started"
    diag = script("slow_diag", f"""
        import pathlib, sys, time
        sys.stdin.read()
        pathlib.Path({str(started)!r}).write_text("yes")
        time.sleep(60)
    """)
    selector.answer({"action": "diagnostics_investigate", "question": "why?"})
    providers = {"sel": selector.provider, "diag": ProviderSettings(command=diag)}
    orchestrator = await start(make_context(providers, builtin_providers={"slow": Blocking()}))
    asking = asyncio.create_task(orchestrator.handle(make_message("why is it slow?")))
    await async_wait_until(started.exists, 10)
    [answer] = await orchestrator.handle(make_message("/cancel@switchyard_bot"))
    assert answer.message == STOPPED_TURN
    assert await asyncio.wait_for(asking, 5) == []


async def test_stop_with_nothing_running_says_so(
    selector: ScriptedSelector, make_context: Callable[..., HandlerContext],
    write_config: Callable[[str], Path], start: Callable[..., Any],
) -> None:
    write_config(CONFIG)
    orchestrator = await start(make_context({"sel": selector.provider}, builtin_providers={"slow": Blocking()}))
    [answer] = await orchestrator.handle(make_message("/Stop"))
    assert answer.message == "Nothing is running."
    assert selector.calls == 0


async def test_stop_ends_a_function_the_selector_called_and_its_message_goes_unanswered(
    selector: ScriptedSelector, make_context: Callable[..., HandlerContext], tmp_path: Path,
    write_config: Callable[[str], Path], start: Callable[..., Any], script: Callable[[str, str], list[str]],
) -> None:
    started = tmp_path / "function-started"
    slow = script("slow_function", f"""
        import pathlib, sys, time
        sys.stdin.read()
        pathlib.Path({str(started)!r}).write_text("yes")
        time.sleep(60)
    """)
    write_config(CONFIG + f"""
    functions:
      slowly: {{description: Takes long, parameters: {{type: object}}, command: {json.dumps(slow)}}}
    """)
    selector.answer({"action": "command_invoke", "function": "slowly", "arguments": {}})
    orchestrator = await start(make_context({"sel": selector.provider}, builtin_providers={"slow": Blocking()}))
    asking = asyncio.create_task(orchestrator.handle(make_message("do it slowly")))
    await async_wait_until(started.exists, 10)
    [answer] = await orchestrator.handle(make_message("/stop"))
    assert answer.message == STOPPED_TURN
    assert await asyncio.wait_for(asking, 5) == []
