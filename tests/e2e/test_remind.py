"""The chat tool `remind` end to end: an agent of a real `switchyard run` sets a one-off reminder, the gateway is
killed with SIGKILL before its time, and the reminder still fires once at its time after the restart; on
PostgreSQL two processes (two hosts on one database) run after the kill, and it still fires once."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from gateway.testing import wait_until
from tests.e2e.conftest import ORCHESTRATOR, PROVIDERS, Switchyard, both_backends

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120), both_backends]

TEXT = "time to stand up"
CONVERSATION = "conv:heartbeat/beat/ops"


def reminder_rows(switchyard: Switchyard) -> list[dict[str, Any]]:
    listed = switchyard.cli("schedules", "--json")
    assert listed.returncode == 0, listed.stderr
    return [row for row in json.loads(listed.stdout) if row["schedule"].startswith("reminder:")
            and row["conversation"] == CONVERSATION]  # the heartbeat's own beat sets one in its conversation too


def reminded(switchyard: Switchyard) -> list[dict[str, Any]]:
    return [r for r in switchyard.replies() if r["message"] == TEXT and r.get("conversationId") == "ops"]


def test_a_reminder_set_by_an_agent_fires_once_at_its_time_across_a_kill_9(switchyard: Switchyard) -> None:
    agent = {"command": [sys.executable, str(PROVIDERS / "chat_tools_agent.py")],
             "env": {"CHAT_TOOLS_REMIND": "in 8s", "CHAT_TOOLS_REMIND_TEXT": TEXT, "CHAT_TOOLS_SENDS": "0"}}
    providers = {"fake_selector": {"command": [sys.executable, str(PROVIDERS / "selector.py")]}, "tooled": agent}
    orchestrator = {**ORCHESTRATOR, "diagnostics": {"provider": "rules"},
                    "agents": {"writer": {"provider": "tooled", "prompt": "{{message}}"}}}
    channels = [{"id": "beat", "type": "heartbeat", "interval_sec": 3600}]
    switchyard.configure({"providers": providers, "channels": channels}, orchestrator)
    switchyard.start()
    switchyard.send("the plan", messageId="r1", channel="heartbeat", channelProfileId="beat", conversationId="ops")
    answer = wait_until(lambda: [r for r in switchyard.replies("r1") if "final answer" in r["message"]], 30)
    assert "(remind: reminder set: once at" in answer[0]["message"], answer
    switchyard.kill()  # before the reminder's time: it is stored, not yet fired
    assert not reminded(switchyard)
    [row] = reminder_rows(switchyard)
    assert row["deliver"] == "beat/ops" and row["next"]

    others = [switchyard.another()] if switchyard.backend == "postgres" else []
    switchyard.start()
    for other in others:
        other.start()
    try:
        wait_until(lambda: reminded(switchyard), 40)
        wait_until(lambda: not reminder_rows(switchyard), 20)  # a one-off that fired is removed
        assert len(reminded(switchyard)) == 1, reminded(switchyard)
        events = [e for e in switchyard.events("schedule.fired") if e["schedule"] == row["schedule"]]
        assert len(events) == 1, events
    finally:
        for other in others:
            other.stop()
