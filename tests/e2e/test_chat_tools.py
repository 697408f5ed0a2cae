"""The chat tools end to end: `switchyard run` as a process, an agent calling them over MCP mid-turn."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from gateway.testing import wait_until
from tests.e2e.conftest import ORCHESTRATOR, PROVIDERS, Switchyard, both_backends
from tests.process import pid_alive, session_members

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90), both_backends]


def test_three_send_messages_then_the_answer_arrive_in_order_once_each(switchyard: Switchyard) -> None:
    providers = {"fake_selector": {"command": [sys.executable, str(PROVIDERS / "selector.py")]},
                 "tooled": {"command": [sys.executable, str(PROVIDERS / "chat_tools_agent.py")]}}
    orchestrator = {**ORCHESTRATOR, "diagnostics": {"provider": "rules"},
                    "agents": {"writer": {"provider": "tooled", "prompt": "{{message}}"}}}
    switchyard.configure({"providers": providers}, orchestrator)
    switchyard.start()
    switchyard.send("the plan", messageId="t1")
    wait_until(lambda: "final answer to the plan" in [r["message"] for r in switchyard.replies("t1")], 60)
    wait_until(lambda: len(switchyard.events("chat_tool.called")) == 3)
    # on a busy machine the run may also be acknowledged ("Started run …") or noted ("⏳ …"): those aside
    replies = [r for r in switchyard.replies("t1") if r["message"].startswith(("progress", "final"))]
    assert [r["message"] for r in replies] == ["progress 1", "progress 2", "progress 3", "final answer to the plan"]
    assert len({r["workflowRunId"] for r in replies}) == 1


def test_a_kill_9_between_the_messages_sends_each_once(switchyard: Switchyard, tmp_path: Path) -> None:
    """The gateway dies after two of the three messages; the run's step is retried and its agent sends all three
    again: the two already stored are not sent twice, and the answer follows the third."""
    gate = tmp_path / "gate"
    agent = {"command": [sys.executable, str(PROVIDERS / "chat_tools_agent.py")],
             "env": {"CHAT_TOOLS_GATE": str(gate), "CHAT_TOOLS_GATE_AFTER": "2"}}
    providers = {"fake_selector": {"command": [sys.executable, str(PROVIDERS / "selector.py")]}, "tooled": agent}
    orchestrator = {**ORCHESTRATOR, "diagnostics": {"provider": "rules"}, "reply_within_sec": 0.5,
                    "agents": {"writer": {"provider": "tooled", "prompt": "{{message}}"}}}
    switchyard.configure({"providers": providers}, orchestrator)
    switchyard.start()
    switchyard.send("the plan", messageId="k1")
    wait_until(lambda: [r["message"] for r in switchyard.replies("k1")][-2:] == ["progress 1", "progress 2"], 30)
    assert switchyard.process is not None
    orphans = session_members(switchyard.process.pid)
    switchyard.kill()
    gate.touch()  # the killed gateway's agent goes on, finds no server, and ends
    switchyard.start()
    wait_until(lambda: "final answer to the plan" in [r["message"] for r in switchyard.replies("k1")], 60)
    texts = [r["message"] for r in switchyard.replies("k1")]
    assert [t for t in texts if t.startswith(("progress", "final"))] == [
        "progress 1", "progress 2", "progress 3", "final answer to the plan"]
    results = [e["reason"] for e in switchyard.events("chat_tool.called")]
    assert sum("not sent again" in reason for reason in results) == 2
    for pid in orphans:
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_restart_while_a_question_waits_closes_it_and_the_retried_turn_asks_again(switchyard: Switchyard) -> None:
    """As docs/chat-tools.md says: the pending question is closed with a message at the next start, the run's step
    runs again and its agent asks again; the second question, unanswered, expires into "no answer"."""
    agent = {"command": [sys.executable, str(PROVIDERS / "chat_tools_agent.py")],
             "env": {"CHAT_TOOLS_ASK": "Which branch?", "CHAT_TOOLS_SENDS": "0"}}
    providers = {"fake_selector": {"command": [sys.executable, str(PROVIDERS / "selector.py")]}, "tooled": agent}
    orchestrator = {**ORCHESTRATOR, "diagnostics": {"provider": "rules"}, "reply_within_sec": 0.5,
                    "agents": {"writer": {"provider": "tooled", "prompt": "{{message}}"}}}
    switchyard.configure({"providers": providers, "chat_tools": {"ask_timeout_sec": 30}}, orchestrator)
    switchyard.start()
    switchyard.send("the plan", messageId="q1")
    wait_until(lambda: any(r["message"].startswith("❓ Which branch?") for r in switchyard.replies("q1")), 30)
    switchyard.kill()
    switchyard.configure({"providers": providers, "chat_tools": {"ask_timeout_sec": 1}}, orchestrator)
    switchyard.start()
    wait_until(lambda: any("final answer to the plan" in r["message"] for r in switchyard.replies("q1")), 60)
    texts = [r["message"] for r in switchyard.replies("q1")]
    asked = [n for n, text in enumerate(texts) if text.startswith("❓ Which branch?")]
    closed = [n for n, text in enumerate(texts) if text.startswith("⚠️ The gateway restarted")]
    assert len(asked) == 2 and len(closed) == 1 and asked[0] < closed[0] < asked[1], texts
    assert "final answer to the plan (asked: no answer)" in texts[-1]


def test_the_embedded_demo_workflow_shows_the_tools_without_any_cli(switchyard: Switchyard) -> None:
    """No channel profile here, so nobody may answer the demo's question: it expires ("no answer") and the
    demo goes on, as an agent would."""
    switchyard.configure({"providers": {}, "chat_tools": {"ask_timeout_sec": 1}})
    (switchyard.home.orchestrators / "main" / "orchestrator.yaml").unlink()  # the embedded default
    switchyard.start()
    switchyard.send("demo please", messageId="d1", sender="Ada")
    replies = switchyard.reply_to("d1", count=5, timeout=30)
    texts = [r["message"] for r in replies]
    assert texts[0].startswith("Hello Ada: this message comes from the demo agent's send_message tool")
    assert texts[1].startswith("❓ Shall I send you a file too?") and len(replies[1]["buttons"]) == 2
    assert texts[2].startswith("⌛ No answer in time")
    assert replies[3]["message"] == "a file sent with send_file" and len(replies[3]["files"]) == 1
    assert Path(replies[3]["files"][0]).read_text().startswith("A file the demo agent wrote")
    assert texts[4] == "demo step ran"  # the run's result: its last step, the command
    tools = [(e["tool"], e["result"]) for e in switchyard.events("chat_tool.called")]
    assert tools == [("conversation_info", "ok"), ("send_message", "ok"), ("ask", "ok"), ("send_file", "ok")]
