"""The presets against fake claude, codex, gemini and ollama executables (tests/fakes/clis) that reproduce the
real CLIs' argv parsing, envelopes, session rules and failures: selector and agent, sessions per conversation,
failure classes, large and option-like messages, progress notes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.api import HandlerContext, PermanentError
from gateway.settings import ProviderSettings
from gateway.testing import async_wait_until
from orchestrator import Orchestrator
from orchestrator.agents.spawn import ProviderFailed
from tests.fakes.clis import FakeClis
from tests.fakes.orchestrator import FakeOutbox, make_message
from tests.process import pid_alive

PRESETS = ("claude", "codex", "gemini", "ollama")
CHAT_DECISION = {"action": "workflow_start", "workflowId": "chat", "input": {}}

CONFIG = """
selector: {{provider: {selector}}}
diagnostics: {{provider: rules}}
reply_within_sec: 30
progress_after_sec: 0.5
progress_interval_sec: 0.05
rules: {{default_workflow: chat}}
agents:
  helper: {{provider: {agent}, prompt: "{{{{message}}}}"}}
workflows:
  chat:
    description: Talk with the helper agent
    steps:
      - {{id: Reply, agent: helper}}
"""

RETRIES = """
max_retries: {retries}
retry_backoff_sec: 0
"""

Start = Callable[..., Any]


@pytest.fixture
def agents(make_context: Callable[..., HandlerContext], write_config: Callable[[str], Path],
           start: Callable[[HandlerContext], Any]) -> Start:
    """`await agents(selector=…, agent=…, **provider settings)`: an orchestrator whose providers are presets."""

    async def build(selector: str = "rules", agent: str = "claude", retries: int = 0, **extra: Any) -> Orchestrator:
        write_config(CONFIG.format(selector=selector, agent=agent) + RETRIES.format(retries=retries))
        providers = {name: ProviderSettings.model_validate({"type": name, **extra.get(name, {})})
                     for name in PRESETS}
        return await start(make_context(providers))  # type: ignore[no-any-return]

    return build


def _argv_after(call: dict[str, Any], flag: str) -> str:
    argv: list[str] = call["argv"]
    return argv[argv.index(flag) + 1]


@pytest.mark.parametrize(("selector", "agent"), [("claude", "codex"), ("codex", "gemini"), ("gemini", "ollama"),
                                                 ("ollama", "claude")])
async def test_each_preset_as_selector_and_as_agent(fake_clis: FakeClis, agents: Start, selector: str,
                                                    agent: str) -> None:
    fake_clis.answer(selector, f"I will start the chat.\n```json\n{json.dumps(CHAT_DECISION)}\n```")
    fake_clis.answer(agent, f"{agent} here: done")
    orchestrator = await agents(selector=selector, agent=agent)
    [answer] = await orchestrator.handle(make_message("please say hello"))
    assert answer.message == f"{agent} here: done"
    [selector_call] = fake_clis.calls(selector)
    [agent_call] = fake_clis.calls(agent)
    assert "please say hello" in selector_call["stdin"] and "please say hello" in agent_call["stdin"]
    assert "please say hello" not in " ".join(selector_call["argv"] + agent_call["argv"])


async def test_a_bare_decision_in_a_json_envelope_is_understood(fake_clis: FakeClis, agents: Start) -> None:
    fake_clis.answer("claude", json.dumps({"action": "command_invoke", "function": "queue_stats", "arguments": {}}))
    orchestrator = await agents(selector="claude")
    [answer] = await orchestrator.handle(make_message("how busy?"))
    assert answer.agent == "queue_stats" and "incoming: 2" in answer.message


@pytest.mark.parametrize("agent", ["claude", "codex", "gemini"])
async def test_messages_of_one_conversation_continue_one_session_and_others_get_their_own(
    fake_clis: FakeClis, agents: Start, make_context: Callable[..., HandlerContext],
    start: Callable[[HandlerContext], Any], agent: str,
) -> None:
    orchestrator = await agents(agent=agent)
    for text in ("my name is Ada", "what is my name?"):
        await orchestrator.handle(make_message(text, conversationId="c1"))
    await orchestrator.handle(make_message("hello from elsewhere", conversationId="c2"))
    await orchestrator.stop()
    restarted = await start(make_context({agent: ProviderSettings.model_validate({"type": agent})}))
    [answer] = await restarted.handle(make_message("and now?", conversationId="c1"))
    first, second, other, after_restart = fake_clis.calls(agent)
    assert _resumed(agent, first) is None and _resumed(agent, other) is None
    assert _resumed(agent, second) == _session(agent, first)
    assert _resumed(agent, after_restart) == _session(agent, second), "a restart continues the conversation"
    assert _session(agent, other) not in (_session(agent, first), _session(agent, second))
    assert answer.message.startswith("echo:")


def _session(agent: str, call: dict[str, Any]) -> str:
    """The session a call ended in (claude: the fork it made of the one it resumed)."""
    return str(call["thread_id"] if agent == "codex" else call["session_id"])


def _resumed(agent: str, call: dict[str, Any]) -> str | None:
    """The session a call continued, None for a new one."""
    flag = "resume" if agent == "codex" else "--resume"
    return _argv_after(call, flag) if flag in call["argv"] else None


async def test_a_session_the_cli_forgot_is_started_afresh_with_an_event(
    fake_clis: FakeClis, agents: Start, home: Any
) -> None:
    orchestrator = await agents(agent="claude")
    await orchestrator.handle(make_message("first"))
    for path in fake_clis.sessions("claude"):
        path.unlink()  # the CLI's own store lost the session
    [answer] = await orchestrator.handle(make_message("second"))
    assert answer.message == "echo: second"
    first, fresh = fake_clis.calls("claude")  # the call that resumed the lost session failed before its log
    assert "--session-id" in fresh["argv"]
    assert _argv_after(fresh, "--session-id") != _argv_after(first, "--session-id")
    assert '"provider.session_reset"' in home.events_file.read_text()


@pytest.mark.parametrize(("agent", "scenario", "words"), [
    ("claude", "not_logged_in", "Not logged in"),
    ("gemini", "not_logged_in", "Please set an Auth method"),
    ("gemini", "untrusted", "trusted directory"),
    ("codex", "bad_key", "401 Unauthorized"),
])
async def test_a_permanent_failure_is_refused_at_once_with_the_clis_words_and_the_fix(
    fake_clis: FakeClis, agents: Start, agent: str, scenario: str, words: str
) -> None:
    fake_clis.scenario(agent, scenario)
    fake_clis.answer(agent, json.dumps(CHAT_DECISION))
    orchestrator = await agents(selector=agent)
    with pytest.raises(PermanentError) as refused:
        await orchestrator.handle(make_message("hello"))
    assert refused.value.reply is not None and words in refused.value.reply
    assert agent in refused.value.reply and ("log" in refused.value.reply or "trust" in refused.value.reply)
    assert len(fake_clis.calls(agent)) == 1


async def test_a_missing_cli_is_permanent_and_names_the_install(fake_clis: FakeClis, agents: Start) -> None:
    orchestrator = await agents(selector="claude", claude={"binary": "claude-not-installed"})
    with pytest.raises(PermanentError) as refused:
        await orchestrator.handle(make_message("hello"))
    assert refused.value.reply is not None and "was not found" in refused.value.reply
    assert "npm install -g @anthropic-ai/claude-code" in refused.value.reply


async def test_a_cli_that_shows_no_sign_of_work_is_a_retryable_timeout_within_seconds(
    fake_clis: FakeClis, agents: Start
) -> None:
    fake_clis.scenario("codex", "network_hang")
    orchestrator = await agents(selector="codex", codex={"first_output_sec": 1})
    with pytest.raises(ProviderFailed) as failed:
        await orchestrator.handle(make_message("hello"))
    assert failed.value.result.stalled and "no sign of work" in str(failed.value)
    assert "Reconnecting" in str(failed.value)


async def test_a_key_the_model_api_refuses_is_a_permanent_login_failure_at_its_first_retry(
    fake_clis: FakeClis, agents: Start
) -> None:
    fake_clis.scenario("claude", "bad_key")  # claude would retry the 401 for ~3 minutes, printing api_retry lines
    orchestrator = await agents(selector="claude", claude={"first_output_sec": 600, "timeout_sec": 900})
    with pytest.raises(PermanentError) as refused:
        await asyncio.wait_for(orchestrator.handle(make_message("hello")), 60)
    reply = refused.value.reply or ""
    assert "claude is not logged in for the user running switchyard" in reply and "ANTHROPIC_API_KEY" in reply
    assert "the model API refused the login: 401 authentication_failed" in reply
    [call] = fake_clis.calls("claude")
    await async_wait_until(lambda: not pid_alive(call["pid"]))  # stopped, not left retrying


async def test_a_login_claude_refreshes_after_one_refusal_is_answered(fake_clis: FakeClis, agents: Start) -> None:
    """A claude.ai login whose access token the API refuses once prints one `api_retry` 401 line, refreshes
    the token and answers: that first refusal is no reason to stop it (a refused key repeats it)."""
    fake_clis.scenario("claude", "token_refreshed")
    orchestrator = await agents(agent="claude", claude={"first_output_sec": 600, "timeout_sec": 900})
    [answer] = await asyncio.wait_for(orchestrator.handle(make_message("hello")), 60)
    assert answer.message == "echo: hello"


async def test_a_busy_model_api_is_a_sign_of_life_with_a_note(
    fake_clis: FakeClis, agents: Start, outbox: FakeOutbox
) -> None:
    fake_clis.scenario("claude", "overloaded")  # two api_retry lines with 529, then the answer
    orchestrator = await agents(agent="claude", claude={"first_output_sec": 2})
    [answer] = await orchestrator.handle(make_message("hello"))
    assert answer.message == "echo: hello"
    notes = [p.message for p in outbox.payloads if (p.model_extra or {}).get("progressKey")]
    assert "⏳ the model API is retrying: 529 overloaded (attempt 1 of 10)" in notes


@pytest.mark.parametrize("agent", PRESETS)
async def test_a_huge_message_and_one_that_looks_like_an_option_reach_the_agent_intact(
    fake_clis: FakeClis, agents: Start, agent: str
) -> None:
    orchestrator = await agents(agent=agent)
    huge = "x" * 300_000
    await orchestrator.handle(make_message(huge, conversationId="big"))
    await orchestrator.handle(make_message("--version --help", conversationId="opt"))
    big, option = fake_clis.calls(agent)
    assert huge in big["stdin"] and "--version --help" in option["stdin"]
    assert all(len(word) < 1000 for word in big["argv"]) and "--version" not in option["argv"]


async def test_progress_notes_come_from_the_stream_and_stop_with_the_step(
    fake_clis: FakeClis, agents: Start, outbox: FakeOutbox
) -> None:
    fake_clis.scenario("claude", "tool_use:1.5")
    orchestrator = await agents(agent="claude")
    [answer] = await orchestrator.handle(make_message("edit the notes"))
    notes = [p for p in outbox.payloads if p.progress_key and not p.draft]  # not the answer's previews
    assert notes and notes[0].message == "⏳ using Edit: notes.txt"
    assert {(p.model_extra or {})["progressKey"] for p in notes} == {f"{answer.workflowRunId}/Reply"}
    assert answer.message.startswith("echo:")
    count = len(outbox.payloads)
    fake_clis.scenario("claude", "ok")
    await orchestrator.handle(make_message("and again, quickly"))
    assert len(outbox.payloads) == count, "a quick step sends no note"


async def test_the_stateless_selector_sees_the_conversations_last_exchanges(
    fake_clis: FakeClis, agents: Start
) -> None:
    fake_clis.answer("claude", json.dumps(CHAT_DECISION))
    fake_clis.answer("codex", "Paris is the capital of France")
    orchestrator = await agents(selector="claude", agent="codex")
    await orchestrator.handle(make_message("what is the capital of France?", conversationId="geo"))
    await orchestrator.handle(make_message("and its population?", conversationId="geo"))
    await orchestrator.handle(make_message("unrelated", conversationId="other"))
    first, follow_up, other = fake_clis.calls("claude")
    assert "what is the capital of France?" not in first["stdin"].split("Message from")[0]
    assert "what is the capital of France?" in follow_up["stdin"]
    assert "Paris is the capital of France" in follow_up["stdin"]
    assert "capital" not in other["stdin"], "another conversation's history stays out"
    assert "--resume" not in follow_up["argv"] and "--no-session-persistence" in follow_up["argv"]


async def test_run_and_stateless_sessions_and_template_values(
    fake_clis: FakeClis, make_context: Callable[..., HandlerContext], write_config: Callable[[str], Path],
    start: Callable[[HandlerContext], Any],
) -> None:
    write_config(CONFIG.format(selector="rules", agent="claude").replace(
        '"{{message}}"', '"{{channel}}/{{conversationId}}/{{sender}}: {{message}}"'))
    orchestrator = await start(make_context({"claude": ProviderSettings(type="claude", session="run")}))
    await orchestrator.handle(make_message("one", conversationId="c9"))
    await orchestrator.handle(make_message("two", conversationId="c9"))
    first, second = fake_clis.calls("claude")
    assert first["stdin"] == "console/c9/Ada: one"
    assert "--session-id" in second["argv"], "each run starts its own session"
    assert _argv_after(first, "--session-id") != _argv_after(second, "--session-id")


async def test_gemini_a_first_turn_that_failed_reaches_the_model_when_retried_and_the_conversation_goes_on(
    fake_clis: FakeClis, agents: Start
) -> None:
    fake_clis.scenario("gemini", "network,ok")  # gemini wrote the session file, then the model call failed
    orchestrator = await agents(agent="gemini", retries=1)
    [answer] = await orchestrator.handle(make_message("my name is Ada", conversationId="c1"))
    assert answer.message == "echo: my name is Ada"
    [later] = await orchestrator.handle(make_message("what is my name?", conversationId="c1"))
    assert later.message == "echo: what is my name?"
    answered = [call for call in fake_clis.calls("gemini") if call["model_input"]][-2:]
    assert [call["model_input"] for call in answered] == [["my name is Ada"], ["my name is Ada", "what is my name?"]]


async def test_claude_keeps_one_transcript_per_conversation_each_fork_replacing_the_session_it_came_from(
    fake_clis: FakeClis, agents: Start, tmp_path: Path
) -> None:
    config = tmp_path / "claude-config"  # CLAUDE_CONFIG_DIR: where claude keeps projects/<project>/<id>.jsonl
    orchestrator = await agents(agent="claude", retries=1, claude={"env": {"CLAUDE_CONFIG_DIR": str(config)}})
    prompts = ["my name is Ada", "what is my name?", "and again?", "once more?"]
    for turn, prompt in enumerate(prompts):
        fake_clis.scenario("claude", "network,ok" if turn == 2 else "ok")  # a failed fork, then its retry
        [answer] = await orchestrator.handle(make_message(prompt, conversationId="c1"))
        assert answer.message == f"echo: {prompt}"
        assert len(list(config.glob("projects/*/*.jsonl"))) == 1  # not one per turn (nor per failed attempt)
    assert fake_clis.calls("claude")[-1]["model_input"] == prompts  # the fork alone carries every turn


@pytest.mark.parametrize("failing", [0, 1])
async def test_claude_a_retried_turn_reaches_the_model_once_and_later_turns_do_not_carry_the_failed_attempt(
    fake_clis: FakeClis, agents: Start, failing: int
) -> None:
    orchestrator = await agents(agent="claude", retries=1)
    prompts = ["my name is Ada", "what is my name?", "and again?"]
    for turn, prompt in enumerate(prompts):
        # claude keeps the prompt of a failed call in its session (next to a synthetic error reply)
        fake_clis.scenario("claude", "network,ok" if turn == failing else "ok")
        [answer] = await orchestrator.handle(make_message(prompt, conversationId="c1"))
        assert answer.message == f"echo: {prompt}"
    calls = fake_clis.calls("claude")
    assert len(calls) == 4
    answered = [call["model_input"] for index, call in enumerate(calls) if index != failing]
    assert answered == [prompts[:1], prompts[:2], prompts]
