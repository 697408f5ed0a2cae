"""A gateway killed with SIGKILL leaves its warm ACP agents running (claude-agent-acp and codex-acp never exit when
their stdin closes); the next `switchyard run` on the home stops them before it starts answering."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.testing import wait_until
from tests.e2e.conftest import PROVIDERS, Switchyard
from tests.process import pid_alive

pytestmark = pytest.mark.e2e

FAKE_AGENT = Path(__file__).resolve().parents[1] / "fakes" / "acp" / "fake_agent.py"


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[Path]:
    """The fake agents' state folder; every agent they record is killed after the test, whatever happened."""
    state = tmp_path / "agents"
    yield state
    for mark in state.glob("pid-*"):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(int(mark.name.removeprefix("pid-")), signal.SIGKILL)


def test_the_agents_of_a_killed_gateway_are_stopped_at_the_next_start(switchyard: Switchyard, agents: Path) -> None:
    switchyard.configure({"providers": {
        "fake_selector": {"command": [sys.executable, str(PROVIDERS / "selector.py")], "timeout_sec": 30},
        "fake_diagnostics": {"command": [sys.executable, str(PROVIDERS / "diagnostics.py")]},
        "fake_agent": {"type": "claude", "transport": "acp", "timeout_sec": 30, "env": {"FAKE_ACP_STATE": str(agents)},
                       "acp_command": [sys.executable, str(FAKE_AGENT), "--like", "claude"]},
    }})
    switchyard.start()
    first = switchyard.send("hello there", conversationId="c1")
    switchyard.reply_to(first["messageId"], timeout=30)
    [agent] = [int(mark.name.removeprefix("pid-")) for mark in agents.glob("pid-*")]
    assert pid_alive(agent), "the live session stays warm after its turn"

    switchyard.kill()  # SIGKILL: nothing of the gateway runs to stop its agents
    assert pid_alive(agent), "like claude-agent-acp, the fake agent outlives its gateway"
    switchyard.start()
    wait_until(lambda: not pid_alive(agent), 10)
    second = switchyard.send("hello again", conversationId="c1")
    switchyard.reply_to(second["messageId"], timeout=30)  # a new agent (the session loaded or seeded)
    switchyard.stop()
    assert not [mark for mark in agents.glob("pid-*") if pid_alive(int(mark.name.removeprefix("pid-")))], \
        "a gateway that stops leaves no agent behind"
