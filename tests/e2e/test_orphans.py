"""An agent CLI runs in a session of its own (so /stop can end its group), so a gateway killed with SIGKILL
mid-turn leaves it running; the next `switchyard run` on the home ends it before it retries the turn, and the
turn is answered once (both queue backends)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.testing import wait_until
from tests.e2e.conftest import Switchyard, both_backends
from tests.process import pid_alive

pytestmark = [pytest.mark.e2e, both_backends]

ENDED_WITHIN_S = 10.0

# The agent: its first call starts a child and waits on it (a turn that takes long), after writing both pids;
# a later call writes whether the first call's processes still ran when it started, then answers.
AGENT = """
import json, os, subprocess, sys
from pathlib import Path

def alive(pid):
    try:
        os.kill(pid, 0)
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False

state = Path(os.environ["AGENT_STATE"])
prompt = sys.stdin.read().strip()
first = state / "first.pid"
if not first.exists():
    child = subprocess.Popen(["sleep", "60"])
    (state / "first.tmp").write_text(f"{os.getpid()} {child.pid}")
    (state / "first.tmp").rename(first)
    child.wait()
    print("the first call answered")
else:
    earlier = [int(pid) for pid in first.read_text().split()]
    (state / "later.json").write_text(json.dumps({"earlier_alive": [alive(pid) for pid in earlier]}))
    print(f"answered: {prompt}")
"""

ORCHESTRATOR: dict[str, Any] = {
    "selector": {"provider": "rules"}, "diagnostics": {"provider": "rules"},
    "rules": {"default_workflow": "chat"}, "reply_within_sec": 60,
    "agents": {"helper": {"provider": "script", "prompt": "{{message}}"}},
    "workflows": {"chat": {"description": "Reply", "steps": [{"id": "Reply", "agent": "helper"}]}},
}


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    """The agent's folder; whatever it left running is killed at the end, whatever happened."""
    folder = tmp_path / "agent-state"
    folder.mkdir()
    yield folder
    first = folder / "first.pid"
    for pid in [int(p) for p in first.read_text().split()] if first.exists() else []:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def test_the_agent_a_killed_gateway_left_mid_turn_is_ended_before_the_turn_is_retried(
        switchyard: Switchyard, tmp_path: Path, state: Path) -> None:
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    provider = {"command": [sys.executable, str(script)], "timeout_sec": 60, "env": {"AGENT_STATE": str(state)}}
    switchyard.configure({"providers": {"script": provider}}, ORCHESTRATOR)
    switchyard.start()
    sent = switchyard.send("hello there", conversationId="c1")
    agent, child = (int(pid) for pid in wait_until(lambda: _pids(state / "first.pid"), 20))

    switchyard.kill()  # SIGKILL mid-turn: nothing of the gateway runs to end its agent
    assert pid_alive(agent) and pid_alive(child), "the agent, in a session of its own, outlives its gateway"
    switchyard.start()
    wait_until(lambda: not pid_alive(agent) and not pid_alive(child), ENDED_WITHIN_S)

    [reply] = switchyard.reply_to(sent["messageId"], timeout=30)
    assert reply["message"] == "answered: hello there", reply
    later = json.loads((state / "later.json").read_text())
    assert later == {"earlier_alive": [False, False]}, "the retried turn ran beside the one the killed gateway ran"
    [ended] = switchyard.events("process.orphan_ended")
    assert ended["pid"] == agent and ended["program"] == sys.executable, ended
    assert switchyard.stop() == 0
    assert len(switchyard.replies(sent["messageId"])) == 1


def _pids(path: Path) -> list[str] | None:
    return path.read_text().split() if path.exists() else None
