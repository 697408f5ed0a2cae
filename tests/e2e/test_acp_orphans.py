"""A gateway killed with SIGKILL leaves its warm ACP agents running (claude-agent-acp and codex-acp never exit when
their stdin closes); each carries a token naming its gateway process (gateway/runtime/orphans.py), so the next
`switchyard run` on the home ends them before it starts answering, and says so."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gateway.testing import wait_until
from tests.e2e.conftest import Switchyard, live_agent_providers
from tests.process import pid_alive

pytestmark = pytest.mark.e2e

def test_the_agents_of_a_killed_gateway_are_stopped_at_the_next_start(switchyard: Switchyard, agents: Path) -> None:
    switchyard.configure({"providers": live_agent_providers(agents)})
    switchyard.start()
    first = switchyard.send("hello there", conversationId="c1")
    switchyard.reply_to(first["messageId"], timeout=30)
    [agent] = [int(mark.name.removeprefix("pid-")) for mark in agents.glob("pid-*")]
    assert pid_alive(agent), "the live session stays warm after its turn"

    switchyard.kill()  # SIGKILL: nothing of the gateway runs to stop its agents
    assert pid_alive(agent), "like claude-agent-acp, the fake agent outlives its gateway"
    switchyard.start()
    wait_until(lambda: not pid_alive(agent), 10)
    [ended] = wait_until(lambda: switchyard.events("process.orphan_ended"), 10)  # written once the group is ended
    assert ended["pid"] == agent and ended["program"] == sys.executable, ended
    second = switchyard.send("hello again", conversationId="c1")
    switchyard.reply_to(second["messageId"], timeout=30)  # a new agent (the session loaded or seeded)
    switchyard.stop()
    assert not [mark for mark in agents.glob("pid-*") if pid_alive(int(mark.name.removeprefix("pid-")))], \
        "a gateway that stops leaves no agent behind"
