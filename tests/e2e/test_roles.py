"""Roles end to end on both backends (`switchyard run` as a process): a member typing an edit workflow's id is
refused and no agent starts, an admin's runs; the refusal holds across a restart; a guest's /stop of another
sender's turn is refused and the turn goes on, an admin's stops it; `switchyard audit` lists each privileged
action exactly once, and `switchyard roles` shows who has what."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.models import IncomingPayload
from gateway.testing import wait_until
from orchestrator.runs.state import run_id_for
from tests.e2e.conftest import PROVIDERS, Switchyard, both_backends
from tests.fakes.clis import FOLDER as FAKE_CLIS

pytestmark = [pytest.mark.e2e, both_backends]

ORCHESTRATOR: dict[str, Any] = {
    "selector": {"provider": "rules"}, "diagnostics": {"provider": "rules"},
    "rules": {"default_workflow": "chat"}, "reply_within_sec": 30,
    "agents": {"coder": {"provider": "coder", "prompt": "{{message}}"},
               "talker": {"provider": "talker", "prompt": "{{message}}"}},
    "workflows": {"fix": {"description": "Edits the project", "steps": [{"id": "Edit", "agent": "coder"}]},
                  "chat": {"description": "Talks", "steps": [{"id": "Wait", "agent": "talker"}]}},
}
REFUSED = ("You may not start workflow fix: it is for admin (it has an agent that edits files) (your role here: "
           "member). You may: start chat;")


def _settings(tmp_path: Path) -> dict[str, Any]:
    return {
        "providers": {"coder": {"type": "claude", "mode": "edit"},
                      "talker": {"command": [sys.executable, str(PROVIDERS / "agent.py")], "timeout_sec": 60,
                                 "env": {"SLEEP_WAIT": "40"}}},
        "channels": [{"id": "console", "type": "inbox", "root": str(tmp_path / "inbox"), "poll_ms": 50,
                      "settle_ms": 0, "roles": {"admin": ["root"], "guest": ["eve"]}, "default_role": "member"}],
    }


def _claude_calls(state: Path) -> list[dict[str, Any]]:
    calls = state / "calls.jsonl"
    return [json.loads(line) for line in calls.read_text().splitlines() if line.strip()] if calls.exists() else []


def test_roles_are_checked_before_anything_starts_across_a_restart_and_audited_once(
        switchyard: Switchyard, tmp_path: Path) -> None:
    state = tmp_path / "fake-cli-state"
    state.mkdir()
    switchyard.env.update(PATH=f"{FAKE_CLIS}{os.pathsep}{switchyard.env.get('PATH', '')}", FAKE_CLI_STATE=str(state))
    switchyard.configure(_settings(tmp_path), ORCHESTRATOR)
    switchyard.start()

    member = switchyard.send("fix the login page", senderId="u1", conversationId="c1")
    [refused] = switchyard.reply_to(member["messageId"])
    assert refused["message"].startswith(REFUSED), refused["message"]
    admin = switchyard.send("fix the login page", senderId="root", conversationId="c1")
    [ran] = switchyard.reply_to(admin["messageId"])
    assert ran["message"] == "echo: fix the login page", ran["message"]
    assert len(_claude_calls(state)) == 1, "the member's refused message started an agent"

    switchyard.stop()
    switchyard.start()
    again = switchyard.send("/fix it now", senderId="u1", conversationId="c1")
    [still] = switchyard.reply_to(again["messageId"])
    assert still["message"].startswith(REFUSED), still["message"]
    assert len(_claude_calls(state)) == 1, "after the restart a member's edit workflow started an agent"

    talk = switchyard.send("talk to me", senderId="u1", conversationId="group")
    run_id = run_id_for(IncomingPayload(**talk))
    wait_until(lambda: _running_step(switchyard, run_id), 20)
    guest = switchyard.send("/stop", senderId="eve", conversationId="group")
    [no] = switchyard.reply_to(guest["messageId"])
    assert no["message"].startswith("You may not stop what another sender started"), no["message"]
    assert _running_step(switchyard, run_id), "the guest's /stop stopped the member's turn"
    stop = switchyard.send("/stop", senderId="root", conversationId="group")
    [stopped] = switchyard.reply_to(stop["messageId"])
    assert stopped["message"].startswith("Stopped."), stopped["message"]
    wait_until(lambda: not switchyard.unfinished(), 20)
    assert switchyard.replies(talk["messageId"]) == []

    audit = switchyard.cli("audit", "--json")
    assert audit.returncode == 0, audit.stderr
    records = json.loads(audit.stdout)
    assert [(r["action"], r["by"]) for r in records] == [
        ("workflow.start_edit", "console/console/root"), ("turn.stop_other", "console/console/root")], records
    by_admin = json.loads(switchyard.cli("audit", "--json", "--by", "root", "--since", "1h").stdout)
    assert len(by_admin) == 2 and json.loads(switchyard.cli("audit", "--json", "--by", "u1").stdout) == []

    roles = switchyard.cli("roles")
    assert roles.returncode == 0 and "root" in roles.stdout and "(everyone else admitted)" in roles.stdout
    switchyard.stop()


def _running_step(switchyard: Switchyard, run_id: str) -> bool:
    """Whether the chat run's Wait step is running now."""
    return bool(switchyard.run_state(run_id).get("steps", {}).get("Wait", {}).get("status") == "running")


def test_operator_commands_are_audited_once_each(switchyard: Switchyard) -> None:
    switchyard.configure()
    switchyard.plant_dead_letter("a.json", b"{}")
    switchyard.plant_dead_letter("b.json", b"{}")
    assert switchyard.cli("dead", "retry", "a.json").returncode == 0
    assert switchyard.cli("dead", "drop", "b.json").returncode == 0
    assert switchyard.cli("dead", "drop", "ghost.json").returncode == 1  # nothing done: nothing recorded
    assert switchyard.cli("usage", "reset", "--by", "sender", "--all").returncode == 0
    listed = switchyard.cli("audit", "--json", "--by", "operator")
    assert listed.returncode == 0, listed.stderr
    records = json.loads(listed.stdout)
    assert [(r["action"], r["what"]) for r in records] == [
        ("dead.retry", "retried a.json"), ("dead.drop", "dropped b.json"),
        ("usage.reset", records[2]["what"])], records
    assert records[2]["what"].startswith("forgot the usage of every sender since ")
    table = switchyard.cli("audit")
    assert table.stdout.splitlines()[0].split() == ["WHEN", "BY", "WHERE", "ACTION", "WHAT"]
    assert json.loads(switchyard.cli("audit", "--json", "--since", "2999-01-01").stdout) == []
    assert switchyard.cli("audit", "--since", "yesterday").returncode == 2


def test_check_names_unknown_roles_and_permissions(switchyard: Switchyard, tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    settings["roles"] = {"reviewer": {"permissions": ["workflow.strat"]}}
    settings["channels"][0]["roles"] = {"admn": ["root"]}
    orchestrator = {**ORCHESTRATOR, "workflows": {**ORCHESTRATOR["workflows"], "docs": {
        "description": "Docs", "allow": ["writers"], "steps": [{"id": "Edit", "agent": "coder"}]}}}
    switchyard.configure(settings, orchestrator)
    result = switchyard.cli("check")
    assert result.returncode == 2, result.stdout
    assert "roles.reviewer.permissions: unknown permission 'workflow.strat'" in result.stdout
    assert "channels.0 (console): roles.admn: unknown role 'admn'" in result.stdout
    assert "workflows.docs.allow: unknown role 'writers'" in result.stdout
