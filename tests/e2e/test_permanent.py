"""One rule for a permanent failure (a provider's CLI missing, not logged in, refused...), on both backends:
not retried; the sender is told at once in the CLI's own words; the message is a dead letter whose
report keeps every error; `dead retry` runs it again once fixed. For the selector and an agent step alike.
"""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path

import pytest

from gateway.testing import wait_until
from tests.e2e.conftest import ORCHESTRATOR, PROVIDERS, Switchyard, both_backends, provider_calls

pytestmark = [pytest.mark.e2e, both_backends]

FIXED_AGENT = f"""#!{sys.executable}
import sys
sys.stdin.read()
print("the fixed agent answered")
"""

WAIT_FOR_GATE = """
import os, sys, time
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
print("first step done")
"""


def _providers(**extra: dict) -> dict:
    return {"providers": {
        "fake_selector": {"command": [sys.executable, str(PROVIDERS / "selector.py")], "timeout_sec": 30},
        "fake_agent": {"command": [sys.executable, str(PROVIDERS / "agent.py")], "timeout_sec": 30},
        "fake_diagnostics": {"command": [sys.executable, str(PROVIDERS / "diagnostics.py")]}, **extra}}


def _one_dead_letter(switchyard: Switchyard) -> str:
    letters = wait_until(lambda: switchyard.dead_letters() or None, 30)
    assert len(letters) == 1 and letters[0].kind == "message" and letters[0].attempts == 1
    return letters[0].name


def test_an_agent_step_whose_cli_is_missing_is_dead_lettered_and_runs_again_once_fixed(
    switchyard: Switchyard, tmp_path: Path, fake_log: Path
) -> None:
    agent = tmp_path / "bin" / "my-agent"  # not there yet: the operator installs it later
    orchestrator = copy.deepcopy(ORCHESTRATOR)
    orchestrator["agents"]["writer"]["provider"] = "mine"
    switchyard.configure(_providers(mine={"command": [str(agent)], "timeout_sec": 30}), orchestrator)
    switchyard.start()
    switchyard.send("hello there", messageId="perm-agent")

    [told] = switchyard.reply_to("perm-agent")
    assert f"`{agent}` was not found for the user running switchyard: check the command" in told["message"]
    name = _one_dead_letter(switchyard)
    [letter] = switchyard.dead_letters()
    assert "was not found" in letter.reason
    assert any(f"`{agent}` was not found" in error for error in switchyard.dead_errors(name))
    run_id = re.search(r"Run (r-[\w-]+) ", told["message"]).group(1)  # type: ignore[union-attr]
    assert switchyard.run_state(run_id)["state"] == "failed_final"
    assert [c["kind"] for c in provider_calls(fake_log)].count("start") == 1  # the selector ran once: no retry
    assert name in switchyard.cli("dead", "list").stdout

    agent.parent.mkdir()
    agent.write_text(FIXED_AGENT)
    agent.chmod(0o755)
    retried = switchyard.cli("dead", "retry", name)
    assert retried.returncode == 0, retried.stderr
    answer = switchyard.reply_to("perm-agent", count=2, timeout=30)[1]
    assert answer["message"] == "the fixed agent answered" and answer["workflowRunId"] == run_id
    assert switchyard.run_state(run_id)["state"] == "done"
    assert switchyard.dead_letters() == []


def test_a_selector_whose_cli_is_missing_is_dead_lettered_with_its_error_kept(
    switchyard: Switchyard, tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-selector"
    switchyard.configure(_providers(fake_selector={"command": [str(missing)]}))
    switchyard.start()
    switchyard.send("hello there", messageId="perm-selector")

    [told] = switchyard.reply_to("perm-selector")
    assert f"`{missing}` was not found for the user running switchyard" in told["message"]
    name = _one_dead_letter(switchyard)
    assert any(f"`{missing}` was not found" in error for error in switchyard.dead_errors(name))


def test_a_run_acknowledged_before_its_step_fails_permanently_is_dead_lettered_too(
    switchyard: Switchyard, tmp_path: Path
) -> None:
    agent = tmp_path / "bin" / "late-agent"  # not there yet: the operator installs it later
    gate = tmp_path / "go"  # the first step ends once the test saw the ack
    orchestrator = copy.deepcopy(ORCHESTRATOR)
    orchestrator["reply_within_sec"] = 0.5
    orchestrator["agents"]["late"] = {"provider": "mine", "prompt": "finish {{message}}"}
    orchestrator["workflows"]["late"] = {"description": "A fast step, then an agent", "steps": [
        {"id": "First", "command": [sys.executable, "-c", WAIT_FOR_GATE, str(gate)]},
        {"id": "Finish", "agent": "late"}]}
    switchyard.configure(_providers(mine={"command": [str(agent)], "timeout_sec": 30}), orchestrator)
    switchyard.start()
    sent = switchyard.send("start late now", messageId="perm-late")

    [ack] = switchyard.reply_to("perm-late")
    run_id = ack["workflowRunId"]
    assert "I will post the result here" in ack["message"]
    gate.touch()
    told = switchyard.reply_to("perm-late", count=2)[1]
    assert told["workflowRunId"] == run_id and told["runState"] == "failed_final"
    assert f"`{agent}` was not found for the user running switchyard: check the command" in told["message"]
    name = _one_dead_letter(switchyard)
    [letter] = switchyard.dead_letters()
    assert "was not found" in letter.reason and run_id in letter.reason
    assert json.loads(letter.data) == sent  # the file queue's copy is gone: the run's copy (`source: run`)
    if switchyard.backend == "postgres":  # the message's own row, with its original bytes, not a copy
        assert not name.startswith("answered-")
    assert any(f"`{agent}` was not found" in error for error in switchyard.dead_errors(name))
    assert switchyard.run_state(run_id)["state"] == "failed_final"
    assert name in switchyard.cli("dead", "list").stdout
    assert len(switchyard.replies("perm-late")) == 2  # the failure once, no apology besides
    dead = [e for e in switchyard.events("job.failed.final") if e.get("kind") == "message"]
    assert [(e["job_id"], e["conversation"]) for e in dead] == [(name, sent["conversationId"])]

    agent.parent.mkdir()
    agent.write_text(FIXED_AGENT)
    agent.chmod(0o755)
    retried = switchyard.cli("dead", "retry", name)
    assert retried.returncode == 0, retried.stderr
    answered = wait_until(lambda: [r for r in switchyard.replies("perm-late")
                                   if r["message"] == "the fixed agent answered"] or None, 30)
    assert answered[0]["workflowRunId"] == run_id
    assert switchyard.run_state(run_id)["state"] == "done"
    assert switchyard.dead_letters() == []
    failures = [r for r in switchyard.replies("perm-late") if r.get("runState") == "failed_final"]
    assert len(failures) == 1
