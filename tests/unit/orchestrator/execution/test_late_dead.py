"""A refused run (a permanent failure) whose message was answered with an ack: its result is pushed once and
its message dead-lettered through the gateway's `dead_letter`, asked again while the gateway says "not yet"."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gateway.api import HandlerContext
from gateway.models import IncomingPayload
from gateway.settings import ProviderSettings
from gateway.testing import async_wait_until
from orchestrator.runs.state import run_id_for
from orchestrator.storage.files.runs import RunStore
from tests.fakes.orchestrator import FakeOutbox, ScriptedSelector, make_message

WAIT_FOR_GATE = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]):\n    time.sleep(0.01)\nprint('ok')"


def _config(gate: Path) -> str:
    return f"""
        selector: {{provider: sel}}
        reply_within_sec: 0.2
        agents: {{late: {{provider: gone, prompt: "finish {{{{message}}}}"}}}}
        workflows:
          late:
            description: A gated step, then an agent whose CLI is missing
            steps:
              - {{id: First, command: [{json.dumps(sys.executable)}, -c, {json.dumps(WAIT_FOR_GATE)}, "{gate}"]}}
              - {{id: Finish, agent: late}}
    """


class GatewayDeadLetters:
    """The gateway's side: "not yet" (the ack is still being stored) the first time, then a letter's name."""

    def __init__(self) -> None:
        self.calls: list[tuple[IncomingPayload, str, list[str]]] = []

    def __call__(self, message: IncomingPayload, reason: str, errors: list[str]) -> str | None:
        self.calls.append((message, reason, errors))
        return None if len(self.calls) == 1 else "letter.json"


async def test_the_failure_is_pushed_once_and_the_message_dead_lettered_once_the_gateway_can(
    tmp_path: Path, outbox: FakeOutbox, selector: ScriptedSelector, write_config: Callable[[str], Path],
    make_context: Callable[..., HandlerContext], start: Callable[..., Any],
) -> None:
    gate = tmp_path / "gate"
    dead_letter = GatewayDeadLetters()
    gone = ProviderSettings(command=[str(tmp_path / "no-such-agent")], timeout_sec=30)
    context = make_context({"sel": selector.provider, "gone": gone}, dead_letter=dead_letter)
    selector.answer({"action": "workflow_start", "workflowId": "late", "input": {}})
    write_config(_config(gate))
    orchestrator = await start(context)
    message = make_message("start late")
    [ack] = await orchestrator.handle(message)
    run_id = run_id_for(message)
    assert ack.message.startswith(f"Started run {run_id}")
    gate.touch()

    store = RunStore(context.home, fsync=False)
    await async_wait_until(lambda: (run := store.load(run_id)) is not None and run.delivery == "push", 20)
    [pushed] = outbox.payloads  # once, although the dead-lettering was asked twice
    assert pushed.runState == "failed_final" and "was not found" in pushed.message
    assert len(dead_letter.calls) == 2
    [(first, reason, errors), _] = dead_letter.calls
    assert first.messageId == message.messageId
    assert reason.startswith(f"run {run_id}: step Finish:") and "was not found" in reason
    assert errors == [reason]
