"""Spending limits through `switchyard run` on both backends: a sender over their limit gets one reply saying
which limit, how much was used and when it resets, and no agent is started; another sender goes on; `/usage`
shows the sender their own; `switchyard usage` shows the totals and `usage reset` lets the sender go on."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Switchyard, both_backends

pytestmark = [pytest.mark.e2e, both_backends]

COUNTING_AGENT = """
import sys
prompt = sys.stdin.read()
with open(sys.argv[1], "a") as calls:
    calls.write(prompt.replace("\\n", " ") + "\\n")
print("answered: " + prompt)
"""


def _configure(switchyard: Switchyard, tmp_path: Path, limits: list[dict[str, Any]],
               steps: tuple[str, ...] = ("Reply",), fallback: str | None = None) -> Path:
    calls = tmp_path / "agent-calls.txt"
    agent = tmp_path / "agent.py"
    agent.write_text(COUNTING_AGENT)
    counted = {"command": [sys.executable, str(agent), str(calls)], "timeout_sec": 30}
    backup = {"command": [sys.executable, str(agent), str(tmp_path / "backup-calls.txt")], "timeout_sec": 30}
    writer = {"provider": "counted", "prompt": "{{message}}", **({"fallback": fallback} if fallback else {})}
    switchyard.configure(
        {"providers": {"counted": counted, "backup": backup}, "usage": {"limits": limits}},
        {"selector": {"provider": "rules"}, "diagnostics": {"provider": "rules"}, "reply_within_sec": 20,
         "rules": {"default_workflow": "chat"}, "agents": {"writer": writer},
         "workflows": {"chat": {"description": "Reply", "steps": [{"id": step, "agent": "writer"} for step in steps]}}})
    return calls


def _said(switchyard: Switchyard, text: str, sender: str, message_id: str) -> str:
    switchyard.send(text, senderId=sender, conversationId=f"dm-{sender}", messageId=message_id)
    [reply] = switchyard.reply_to(message_id, timeout=30)
    return str(reply["message"])


def _agent_calls(calls: Path) -> list[str]:
    return calls.read_text().splitlines() if calls.exists() else []


def test_a_sender_over_the_limit_is_told_and_no_agent_starts_until_the_operator_resets_it(
        switchyard: Switchyard, tmp_path: Path) -> None:
    calls = _configure(switchyard, tmp_path, [{"per": "sender", "day": {"turns": 2}}])
    switchyard.start()
    assert _said(switchyard, "one", "ada", "u-1") == "answered: one"
    assert _said(switchyard, "two", "ada", "u-2") == "answered: two"

    refused = _said(switchyard, "three", "ada", "u-3")
    assert refused.startswith("You have reached the daily limit of 2 turns per sender: 2 turns used; it resets at "
                              "00:00 UTC on "), refused
    assert _agent_calls(calls) == ["one", "two"]  # the third message started no agent
    assert _said(switchyard, "hi", "bob", "u-4") == "answered: hi"  # another sender is not limited by Ada

    usage = _said(switchyard, "/usage", "ada", "u-5")
    assert "Your usage today: 0 tokens, 2 turns" in usage and "daily limit of 2 turns per sender: 2 turns used" in usage

    table = switchyard.cli("usage", "--by", "sender", "--json")
    assert table.returncode == 0, table.stderr
    assert '"console/console/ada"' in table.stdout and '"console/console/bob"' in table.stdout

    reset = switchyard.cli("usage", "reset", "--by", "sender", "console/console/ada")
    assert reset.returncode == 0, reset.stderr
    assert _said(switchyard, "four", "ada", "u-6") == "answered: four"
    assert _agent_calls(calls) == ["one", "two", "hi", "four"]
    assert switchyard.stop() == 0


def test_a_run_that_crosses_a_limit_between_steps_ends_saying_which_and_is_no_dead_letter(
        switchyard: Switchyard, tmp_path: Path) -> None:
    calls = _configure(switchyard, tmp_path, [{"per": "conversation", "day": {"turns": 1}}], steps=("Reply", "Again"))
    switchyard.start()
    answer = _said(switchyard, "plan it", "ada", "r-1")
    assert "failed at step Again: You have reached the daily limit of 1 turn for this conversation" in answer, answer
    assert _agent_calls(calls) == ["plan it"]
    assert switchyard.dead_letters() == []
    assert switchyard.stop() == 0


def test_an_agent_whose_provider_reached_its_limit_answers_through_its_fallback(
        switchyard: Switchyard, tmp_path: Path) -> None:
    calls = _configure(switchyard, tmp_path, [{"per": "provider", "match": "counted", "month": {"turns": 1}}],
                       fallback="backup")
    switchyard.start()
    assert _said(switchyard, "one", "ada", "f-1") == "answered: one"
    assert _said(switchyard, "two", "ada", "f-2") == "answered: two"  # the fallback answered
    assert _agent_calls(calls) == ["one"]
    assert _agent_calls(tmp_path / "backup-calls.txt") == ["two"]
    table = switchyard.cli("usage", "--by", "provider", "--json")
    assert '"counted"' in table.stdout and '"backup"' in table.stdout, table.stdout + table.stderr
    assert switchyard.stop() == 0
