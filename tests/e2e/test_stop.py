"""`/stop` end to end on both queue backends: it is handled beside the conversation's running message (its own
ordering key), kills the running agent's process group at once, says so, and the conversation goes on."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.testing import wait_until
from tests.e2e.conftest import Switchyard, both_backends, provider_calls
from tests.fakes.clis import FOLDER as FAKE_CLIS

pytestmark = [pytest.mark.e2e, both_backends]

STOP_WITHIN_S = 2.0
NOTHING = "Nothing is running."


@pytest.fixture
def groups(tmp_path: Path) -> Iterator[None]:
    """Kills the process groups of every slow fake a test started, whatever happened (a failed test must not
    leave a sleeping fake behind, not even one a retry started)."""
    yield
    pids = [int(p.read_text()) for p in (tmp_path / "fake-state").glob("selector-*.pid")]
    calls = tmp_path / "fake-cli-state" / "calls.jsonl"
    if calls.exists():
        pids += [int(json.loads(line)["pid"]) for line in calls.read_text().splitlines() if line.strip()]
    for pgid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _pid(path: Path) -> int:
    return int(wait_until(lambda: path.exists() and path.read_text(), 20))


def _stopped_within(switchyard: Switchyard, pgid: int, text: str = "/stop", **fields: Any) -> dict[str, Any]:
    """Sends `/stop` (or `text`) and returns its reply, once the group `pgid` is gone; both must happen
    within STOP_WITHIN_S of sending it."""
    sent_at = time.monotonic()
    stop = switchyard.send(text, **fields)
    wait_until(lambda: not _group_alive(pgid), STOP_WITHIN_S)
    [answer] = switchyard.reply_to(stop["messageId"], timeout=STOP_WITHIN_S)
    assert time.monotonic() - sent_at < STOP_WITHIN_S + 0.5
    return answer


def test_stop_ends_a_running_selector_turn_and_the_next_message_is_answered(
        groups: None, switchyard: Switchyard, fake_log: Path, tmp_path: Path) -> None:
    switchyard.configure()
    switchyard.start()
    slow = switchyard.send("sleep 60 think hard", conversationId="c1")
    pgid = _pid(tmp_path / "fake-state" / f"selector-{slow['messageId']}.pid")
    queued = switchyard.send("and then this", conversationId="c1")
    stop_sent = time.time()
    answer = _stopped_within(switchyard, pgid, "/STOP@switchyard_bot", conversationId="c1")
    assert answer["message"].startswith("Stopped.") and "stopped" in answer["message"][8:], answer["message"]

    [reply] = switchyard.reply_to(queued["messageId"])
    assert reply["message"].startswith("agent Reply answered:") and "and then this" in reply["message"]
    starts = {c["text"]: c["t"] for c in provider_calls(fake_log) if c["kind"] == "start"}
    assert starts["and then this"] > stop_sent, "the message sent before /stop waited behind the stopped one"
    wait_until(lambda: not switchyard.unfinished(), 10)
    assert switchyard.replies(slow["messageId"]) == [], "the stopped message gets no answer, nor an apology"
    assert switchyard.dead_letters() == []
    assert [c["text"] for c in provider_calls(fake_log) if c["kind"] == "start"] == [
        "sleep 60 think hard", "and then this"], "the stopped message was not retried"
    assert switchyard.stop() == 0


def test_stop_kills_a_one_shot_agent_step_cancels_its_run_and_the_next_message_is_answered(
        groups: None, switchyard: Switchyard, tmp_path: Path) -> None:
    state = tmp_path / "fake-cli-state"
    switchyard.env.update(PATH=f"{FAKE_CLIS}{os.pathsep}{switchyard.env.get('PATH', '')}",
                          FAKE_CLI_STATE=str(state), FAKE_CLI_SCENARIO_CLAUDE="slow:60,ok")
    orchestrator: dict[str, Any] = {
        "selector": {"provider": "rules"}, "diagnostics": {"provider": "rules"},
        "rules": {"default_workflow": "chat"}, "reply_within_sec": 30,
        "agents": {"helper": {"provider": "claude", "prompt": "{{message}}"}},
        "workflows": {"chat": {"description": "Reply", "steps": [{"id": "Reply", "agent": "helper"}]}},
    }
    switchyard.configure({"providers": {"claude": {"type": "claude", "session": "conversation"}}}, orchestrator)
    switchyard.start()
    first = switchyard.send("first question", conversationId="c2")
    calls = state / "calls.jsonl"
    pgid = int(wait_until(lambda: calls.exists() and json.loads(calls.read_text().splitlines()[0])["pid"], 20))
    queued = switchyard.send("second question", conversationId="c2")
    answer = _stopped_within(switchyard, pgid, conversationId="c2")

    run_id = answer["workflowRunId"]
    assert answer["message"] == f"Stopped. Cancelled run {run_id} (workflow chat).", answer["message"]
    assert switchyard.run_state(run_id)["state"] == "cancelled"
    [reply] = switchyard.reply_to(queued["messageId"])
    assert reply["message"] == "echo: second question"
    wait_until(lambda: not switchyard.unfinished(), 10)
    assert switchyard.dead_letters() == []
    assert switchyard.replies(first["messageId"]) == [], "the stopped run answered too: /stop's reply said it"
    assert switchyard.stop() == 0


def test_stop_with_nothing_running_says_so_and_changes_nothing(switchyard: Switchyard) -> None:
    switchyard.configure()
    switchyard.start()
    stop = switchyard.send("/stop", conversationId="c3")
    [answer] = switchyard.reply_to(stop["messageId"])
    assert answer["message"] == NOTHING
    hello = switchyard.send("hello", conversationId="c3")
    [reply] = switchyard.reply_to(hello["messageId"])
    assert reply["message"].startswith("agent Reply answered:")
    assert switchyard.stop() == 0
