"""orchestrator/chat/selector.py and rules.py: decisions parsed from any answer, request and result files."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.api import HandlerContext
from gateway.home import Home
from gateway.settings import ProviderSettings
from gateway.telemetry.events import read_events
from gateway.testing import async_wait_until
from orchestrator.agents.builtin import select_by_rules
from orchestrator.chat.selector import SelectorError, parse_decision
from orchestrator.runs.retention import prune_selector_files
from tests.fakes.orchestrator import make_message

Script = Callable[[str, str], list[str]]


def test_bare_object() -> None:
    assert parse_decision('{"action": "workflow_status"}') == {"action": "workflow_status"}


def test_fenced_object_in_prose() -> None:
    decision = {"action": "workflow_start", "workflowId": "build", "input": {"a": {"b": 1}}}
    text = f"Sure.\n```json\n{json.dumps(decision)}\n```\n"
    assert parse_decision(text) == decision


def test_last_valid_object_wins() -> None:
    text = ('First I thought {"action": "workflow_status"} but then {"note": "x"} and finally '
            '{"action": "command_invoke", "function": "queue_stats", "arguments": {}} {"action": "dance"}')
    assert parse_decision(text)["action"] == "command_invoke"


def test_object_inside_broken_braces_is_found() -> None:
    assert parse_decision('{ oops {"action": "workflow_status"}')["action"] == "workflow_status"


@pytest.mark.parametrize("text", ["", "no json here", '{"action": "fly"}', "{broken", '["workflow_status"]'])
def test_garbage_is_a_selector_error(text: str) -> None:
    with pytest.raises(SelectorError, match="no JSON decision with an action"):
        parse_decision(text)


def _request(text: str, active: dict[str, Any] | None = None, **rules: Any) -> dict[str, Any]:
    return {"message": {"message": text}, "workflows": [{"id": "chat"}, {"id": "build"}],
            "allowedActions": [], "activeRun": active, "rules": rules}


@pytest.mark.parametrize(("text", "rules", "expected"), [
    ("/status", {}, {"action": "workflow_status"}),
    ("Progress", {}, {"action": "workflow_status"}),
    ("/help", {}, {"action": "command_invoke", "function": "list_workflows", "arguments": {}}),
    ("please Deploy it", {"keywords": {"deploy": "build"}},
     {"action": "workflow_start", "workflowId": "build", "input": {}}),
    ("build now", {}, {"action": "workflow_start", "workflowId": "build", "input": {}}),
    ("hello", {"default_workflow": "chat"}, {"action": "workflow_start", "workflowId": "chat", "input": {}}),
    ("hello", {}, {"action": "command_invoke", "function": "list_workflows", "arguments": {}}),
])
def test_rules_selector(text: str, rules: dict[str, Any], expected: dict[str, Any]) -> None:
    assert select_by_rules(_request(text, **rules)) == expected


def test_rules_cancel_names_the_active_run() -> None:
    decision = select_by_rules(_request("/cancel", {"runId": "r-1"}))
    assert decision == {"action": "command_invoke", "function": "cancel_run", "arguments": {"runId": "r-1"}}


CONFIG = """
    selector: {provider: sel}
    agents: {a: {provider: echo}}
    workflows: {chat: {description: Talk, steps: [{id: Reply, agent: a}]}}
"""

SELECTOR_SCRIPT = """
    import json, os, sys
    sys.stdin.read()
    request = json.load(open(os.environ["SWITCHYARD_REQUEST"]))
    decision = {"action": "command_invoke", "function": "queue_stats", "arguments": {}}
    print("Thinking... " + json.dumps(decision))
"""


async def test_request_and_result_files(
    home: Home, script: Script, make_context: Callable[..., HandlerContext],
    write_config: Callable[[str], Path], start: Callable[[HandlerContext], Any],
) -> None:
    write_config(CONFIG)
    argv = script("sel", SELECTOR_SCRIPT)
    orchestrator = await start(make_context({"sel": ProviderSettings(command=argv)}))
    message = make_message("how busy is it?")
    [answer] = await orchestrator.handle(message)
    assert answer.agent == "queue_stats" and "incoming: 2" in answer.message
    [request_file] = list(home.select_incoming.glob("*.json"))
    request = json.loads(request_file.read_text())
    assert request["orchestratorId"] == "main"
    assert request["message"]["messageId"] == message.messageId
    assert request["workflows"] == [{"id": "chat", "description": "Talk", "inputs": None}]
    names = {f["name"] for f in request["availableFunctions"]}
    assert {"list_workflows", "cancel_run", "queue_stats"} <= names
    assert request["activeRun"] is None
    assert request["allowedActions"] == ["workflow_start", "workflow_status", "diagnostics_investigate",
                                         "command_invoke"]
    [result_file] = await async_wait_until(lambda: list(home.select_results.glob("*.json")))
    assert result_file.name == request_file.name
    result = json.loads(result_file.read_text())
    assert result["requestId"] == request["requestId"]
    assert result["decision"]["function"] == "queue_stats"
    assert result["raw"].startswith("Thinking...") and result["exitCode"] == 0 and result["error"] is None
    decided = [e for e in read_events(home.events_file) if e["event"] == "selector.decided"]
    assert decided[-1]["action"] == "command_invoke" and decided[-1]["request_id"] == request["requestId"]
    assert set(request) == documented_request_keys(), "docs/orchestrator.md's table of the request's keys"


def documented_request_keys() -> set[str]:
    """The keys the table under "The selector request" in docs/orchestrator.md names."""
    text = (Path(__file__).resolve().parents[4] / "docs" / "orchestrator.md").read_text()
    table = text.split("### The selector request", 1)[1].split("\n\n", 2)[1]
    return set(re.findall(r"^\| `(\w+)` \|", table, re.M))


async def test_unparseable_answer_gets_a_clear_reply(
    home: Home, script: Script, make_context: Callable[..., HandlerContext],
    write_config: Callable[[str], Path], start: Callable[[HandlerContext], Any],
) -> None:
    write_config(CONFIG)
    argv = script("sel", "import sys; sys.stdin.read(); print('I would start the build workflow.')")
    orchestrator = await start(make_context({"sel": ProviderSettings(command=argv)}))
    [answer] = await orchestrator.handle(make_message("build it"))
    assert answer.message == ("I could not understand the selector's answer "
                              "(no JSON decision with an action). Nothing was started.")
    assert [p.name for p in home.runs.iterdir()] == []
    [result_file] = await async_wait_until(lambda: list(home.select_results.glob("*.json")))
    result = json.loads(result_file.read_text())
    assert result["decision"] is None and "no JSON decision" in result["error"]


async def test_a_built_in_selector_leaves_both_files_too(
    home: Home, make_context: Callable[..., HandlerContext], write_config: Callable[[str], Path],
    start: Callable[[HandlerContext], Any],
) -> None:
    # The built-in gets the request in process; both files are written off the reply path.
    write_config("rules: {default_workflow: null}\n")
    orchestrator = await start(make_context())
    [answer] = await orchestrator.handle(make_message("what can you do?"))
    [request_file] = await async_wait_until(lambda: list(home.select_incoming.glob("*.json")))
    [result_file] = await async_wait_until(lambda: list(home.select_results.glob("*.json")))
    request, result = json.loads(request_file.read_text()), json.loads(result_file.read_text())
    assert request["requestId"] == result["requestId"] == request_file.stem == result_file.stem
    assert request["message"]["message"] == "what can you do?"
    assert result["decision"] == {"action": "command_invoke", "function": "list_workflows", "arguments": {}}
    assert answer.agent == "list_workflows"
    assert result["exitCode"] == 0 and result["error"] is None


def test_old_selector_files_are_pruned(home: Home) -> None:
    old, new = home.select_incoming / "old.json", home.select_results / "new.json"
    old.write_text("{}")
    new.write_text("{}")
    long_ago = time.time() - 8 * 86400
    os.utime(old, (long_ago, long_ago))
    assert prune_selector_files(home) == 1
    assert not old.exists() and new.exists()


def test_a_selector_file_half_written_by_a_killed_process_is_pruned_after_a_minute(home: Home) -> None:
    stale, fresh = home.select_results / "a.json.123-0.tmp", home.select_incoming / "b.json.456-0.tmp"
    stale.write_text("{")
    fresh.write_text("{")  # another process may be writing it right now
    two_minutes_ago = time.time() - 120
    os.utime(stale, (two_minutes_ago, two_minutes_ago))
    assert prune_selector_files(home) == 1
    assert not stale.exists() and fresh.exists()
