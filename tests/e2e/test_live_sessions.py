"""Issue 22's goals end to end: `switchyard run` as a process, a Telegram profile on the fake Bot API, and
an orchestrator whose chat agent is a live ACP session (`transport: acp`) run by the fake adapter
(tests/e2e/providers/acp_agent.py: tests/fakes/acp/fake_agent.py whose allowed tool calls really run).

A tool call's question arrives with an inline keyboard; "Allow" runs the tool, "Deny" and expiry do not
(the user is told), a gateway killed while an approval is pending closes it and asks again; `/stop` ends a
streaming turn at once; an answer streams into one message. No agent process outlives `switchyard run`.
Allow, the restart, /stop and streaming run on both queue backends (files, and PostgreSQL where available).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.testing import wait_until
from orchestrator.chat.approvals import EXPIRED_TEXT, RESTARTED_TEXT
from tests.e2e.conftest import Switchyard, agent_pids, both_backends
from tests.e2e.fake_thread import FakeThread
from tests.e2e.test_channels import TELEGRAM_ENV, telegram_profile
from tests.fakes.acp.procs import group_members
from tests.fakes.telegram_server import FakeTelegram
from tests.process import pid_alive

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90),
              pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")]

AGENT = Path(__file__).parent / "providers" / "acp_agent.py"
CHAT = 1001
WAIT_S = 30
STOP_WITHIN_S = 2.0


def orchestrator(**extra: Any) -> dict[str, Any]:
    """Every message runs the chat workflow: one step, the live agent answering the message as it is."""
    return {"selector": {"provider": "rules"}, "diagnostics": {"provider": "rules"},
            "rules": {"default_workflow": "chat"}, "reply_within_sec": 30,
            "stream_after_sec": 0.2, "stream_interval_sec": 0.3,
            "agents": {"helper": {"provider": "live", "prompt": "{{message}}"}},
            "workflows": {"chat": {"description": "Reply", "steps": [{"id": "Reply", "agent": "helper"}]}},
            **extra}


class Chat:
    """The user's side of one private Telegram chat with the bot, on the fake Bot API."""

    def __init__(self, telegram: FakeThread[FakeTelegram]):
        self.thread, self.fake = telegram, telegram.server

    def say(self, text: str) -> None:
        self.thread.call(self.fake.deliver, self.thread.run(self.fake.message, CHAT, text))

    def shown(self) -> list[str]:
        """Each message of the bot as the chat shows it now (edits applied), in the order they were posted."""
        def read() -> list[str]:
            texts = {s.message_id: s.text or "" for s in self.fake.sent}
            texts.update({e.message_id: e.text for e in self.fake.edits})
            return list(texts.values())
        return self.thread.run(read)

    def posted(self) -> list[tuple[int, str]]:
        """(message id, first text) of each message the bot posted."""
        return self.thread.run(lambda: [(s.message_id, s.text or "") for s in self.fake.sent])

    def edits(self) -> list[tuple[int, str]]:
        return self.thread.run(lambda: [(e.message_id, e.text) for e in self.fake.edits])

    def questions(self) -> list[dict[str, str]]:
        """The bot's messages with an inline keyboard: each one's buttons, label -> callback data."""
        return self.thread.run(lambda: [{text: data for data, text in s.buttons} for s in self.fake.sent
                                        if s.buttons])

    def tap(self, question: dict[str, str], label: str) -> None:
        query = self.thread.run(self.fake.callback_query, CHAT, question[label])
        self.thread.call(self.fake.deliver, query, kind="callback_query")

    def wait_for(self, needle: str, timeout: float = WAIT_S) -> str:
        """The first message shown containing `needle`, once there is one."""
        return str(wait_until(lambda: next((t for t in self.shown() if needle in t), None), timeout))


@pytest.fixture
def telegram() -> Iterator[FakeThread[FakeTelegram]]:
    with FakeThread(FakeTelegram) as fake:
        yield fake


def _left_running(state: Path) -> list[int]:
    """The agent processes (and members of their groups) still running."""
    pids = agent_pids(state)
    return [pid for pid in pids if pid_alive(pid)] + [
        int(str(m["pid"])) for pid in pids for m in group_members(pid) if pid_alive(int(str(m["pid"])))]


def start(switchyard: Switchyard, telegram: FakeThread[FakeTelegram], agents: Path, *, like: str = "claude",
          **extra: Any) -> Chat:
    """Starts `switchyard run` with the Telegram profile and the live agent `live` (the fake adapter behaving
    like `like`)."""
    switchyard.env.update({TELEGRAM_ENV: telegram.server.token, "FAKE_ACP_STATE": str(agents),
                           "FAKE_ACP_MINUTE_SEC": "0.001"})
    live = {"type": like, "transport": "acp", "acp_command": [sys.executable, str(AGENT), "--like", like],
            "timeout_sec": 60}
    switchyard.configure({"providers": {"live": live}, "channels": [telegram_profile(telegram.server)]},
                         orchestrator(**extra))
    switchyard.start()
    return Chat(telegram)


def _stop_leaves_no_agent(switchyard: Switchyard, agents: Path) -> None:
    assert agent_pids(agents), "no agent ever ran"
    assert switchyard.stop() == 0
    assert _left_running(agents) == [], "an agent process outlived `switchyard run`"


# --- 1. Allow ----------------------------------------------------------------------------------------


def _tool(path: Path) -> str:
    """The command the agent asks to run: it appends a line to `path` each time it really runs."""
    return f'sh -c "echo ran >> {path}"'


def _settled(switchyard: Switchyard) -> None:
    """Waits until every message was handled (nothing waiting or in flight)."""
    wait_until(lambda: not switchyard.unfinished(), WAIT_S)


@both_backends
def test_a_tap_on_allow_reaches_the_agent_the_tool_runs_and_the_answer_arrives(
        switchyard: Switchyard, telegram: FakeThread[FakeTelegram], agents: Path, tmp_path: Path) -> None:
    made = tmp_path / "made-by-the-tool"
    title = _tool(made)
    chat = start(switchyard, telegram, agents)
    chat.say(f"tidy up [run={title}]")
    [question] = wait_until(chat.questions, WAIT_S)
    assert list(question) == ["Always Allow", "Allow", "Reject"]  # the adapter's options, one button each
    [asked] = chat.shown()
    assert asked.startswith(f"🔐 The agent asks to run: {title}\n"), asked
    assert not made.exists(), "the tool ran before anyone answered"

    chat.tap(question, "Allow")
    chat.wait_for(f"ran {title}")
    assert made.read_text() == "ran\n", "the allowed tool did not run (once)"
    _settled(switchyard)
    assert chat.shown() == [f"{asked}\n\nanswered: Allow", f"Allowed: {title}", f"ran {title}"]
    _stop_leaves_no_agent(switchyard, agents)


# --- 2. Deny, expiry, restart -------------------------------------------------------------------------


@pytest.mark.parametrize(("like", "said"), [("claude", "User refused permission to run {title}"),
                                            ("codex", "The tool call was denied: {title}.")])
def test_a_tap_on_deny_keeps_the_tool_from_running_and_the_answer_says_it_was_denied(
        switchyard: Switchyard, telegram: FakeThread[FakeTelegram], agents: Path, tmp_path: Path, like: str,
        said: str) -> None:
    """claude's answer says the user refused; codex ends such a turn without a word, and Switchyard says so."""
    made = tmp_path / "made-by-the-tool"
    title = _tool(made)
    chat = start(switchyard, telegram, agents, like=like)
    chat.say(f"tidy up [run={title}]")
    [question] = wait_until(chat.questions, WAIT_S)
    deny = {"claude": "Reject", "codex": "No"}[like]
    chat.tap(question, deny)
    answer = chat.wait_for(said.format(title=title))
    _settled(switchyard)
    assert chat.shown()[1:] == [f"Denied: {title}", answer]
    assert not made.exists(), "a denied tool ran"
    _stop_leaves_no_agent(switchyard, agents)


def test_an_unanswered_approval_expires_denied_and_the_user_is_told(
        switchyard: Switchyard, telegram: FakeThread[FakeTelegram], agents: Path, tmp_path: Path) -> None:
    made = tmp_path / "made-by-the-tool"
    title = _tool(made)
    chat = start(switchyard, telegram, agents, approval_timeout_sec=1)
    chat.say(f"tidy up [run={title}]")
    [question] = wait_until(chat.questions, WAIT_S)
    chat.wait_for(EXPIRED_TEXT.format(title=title))
    chat.wait_for(f"User refused permission to run {title}")  # the agent was told: denied
    _settled(switchyard)
    chat.tap(question, "Allow")  # too late
    chat.wait_for("That request expired (denied).")
    assert not made.exists(), "an expired approval's tool ran"
    _stop_leaves_no_agent(switchyard, agents)


@both_backends
def test_a_gateway_killed_while_an_approval_is_pending_closes_it_and_the_retried_turn_asks_again(
        switchyard: Switchyard, telegram: FakeThread[FakeTelegram], agents: Path, tmp_path: Path) -> None:
    made = tmp_path / "made-by-the-tool"
    title = _tool(made)
    chat = start(switchyard, telegram, agents)
    chat.say(f"tidy up [run={title}]")
    [first] = wait_until(chat.questions, WAIT_S)
    wait_until(lambda: switchyard.count("outgoing.sent"), WAIT_S)  # and the gateway knows it was delivered
    switchyard.kill()  # kill -9 while the approval is pending
    for pid in agent_pids(agents):  # the killed gateway's agent outlives it: gone as a crashed host's would be
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    wait_until(lambda: not _left_running(agents), 10)

    switchyard.start()
    chat.wait_for(RESTARTED_TEXT.format(title=title))
    second = wait_until(lambda: next((q for q in chat.questions() if q != first), None), WAIT_S)
    chat.tap(second, "Allow")
    chat.wait_for(f"ran {title}")
    _settled(switchyard)
    assert made.read_text() == "ran\n", "the tool did not run once"
    shown = chat.shown()
    assert sum(text.startswith("🔐") for text in shown) == 2, "asked once per attempt"
    assert shown[-2:] == [f"Allowed: {title}", f"ran {title}"], shown
    assert [r["message"] for r in switchyard.replies() if r["message"].startswith("ran ")] == [f"ran {title}"]
    chat.tap(first, "Allow")  # the closed question's buttons answer nothing any more
    chat.wait_for("That request was closed (the gateway restarted).")
    assert made.read_text() == "ran\n"
    _stop_leaves_no_agent(switchyard, agents)


# --- 3. /stop -----------------------------------------------------------------------------------------


@both_backends
def test_stop_ends_a_streaming_turn_at_once_and_the_next_message_is_answered(
        switchyard: Switchyard, telegram: FakeThread[FakeTelegram], agents: Path) -> None:
    chat = start(switchyard, telegram, agents)
    chat.say("remember the word heron")
    chat.wait_for("answer to: remember the word heron (0 earlier)")
    chat.say("tell me a long story [chunks=40][delay=0.3]")
    chat.wait_for("answer to: tell")  # the answer is streaming
    sent_at = time.monotonic()
    chat.say("/stop")
    chat.wait_for("Stopped.", STOP_WITHIN_S)  # sent once the turn has ended
    assert time.monotonic() - sent_at < STOP_WITHIN_S
    assert any(text.startswith("Stopped. Cancelled run ") for text in chat.shown())
    assert not any("long story (1 earlier)" in text for text in chat.shown()), "the whole answer came"

    chat.say("and then? [recall=heron]")
    chat.wait_for("recall heron: yes")  # answered, and the session still remembers
    assert not any(text.endswith("was cancelled.") for text in chat.shown()), "/stop was answered twice"
    _settled(switchyard)
    _stop_leaves_no_agent(switchyard, agents)


# --- 4. Streaming -------------------------------------------------------------------------------------


@both_backends
def test_an_answer_streams_into_one_message_that_ends_as_the_answer(
        switchyard: Switchyard, telegram: FakeThread[FakeTelegram], agents: Path) -> None:
    answer = "answer to: tell me about the fox (0 earlier)"
    chat = start(switchyard, telegram, agents)
    chat.say("tell me about the fox [chunks=8][delay=0.3]")
    chat.wait_for(answer)
    _settled(switchyard)
    [(message_id, first)] = chat.posted()  # one message, no preview left beside a copy of the answer
    assert answer.startswith(first) and len(first) < len(answer), f"no preview before the answer: {first!r}"
    texts = [text for edited, text in chat.edits() if edited == message_id]
    assert len(texts) >= 2 and texts[-1] == answer, texts  # it grew, and ended as the answer
    _stop_leaves_no_agent(switchyard, agents)
