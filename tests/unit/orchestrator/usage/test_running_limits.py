"""Limits count the turns running now (issue 32 §4), through the Orchestrator: six messages of one sender at once,
in six conversations, with `turns: 2` a day start two agent turns; the reservation taken before a CLI selector is
that selector's turn (not counted twice), and a built-in selector's decision, no turn, leaves none behind."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.api import BuiltinProvider, HandlerContext
from gateway.config.usage import UsageSettings
from gateway.home import Home
from gateway.settings import ProviderSettings, QueueSettings, Settings
from gateway.telemetry.events import EventLog
from orchestrator import Orchestrator
from tests.fakes.orchestrator import NO_CHAT_TOOLS, FakeOutbox, ScriptedSelector, make_message

CONFIG = """
selector: {{provider: {selector}}}
diagnostics: {{provider: rules}}
reply_within_sec: 30
stream: false
rules: {{keywords: {{deploy: chat}}}}
agents:
  helper: {{provider: {agent}, prompt: "{{{{message}}}}"}}
workflows:
  chat:
    steps:
      - {{id: Reply, agent: helper}}
"""
Build = Callable[..., Awaitable[Orchestrator]]


@pytest.fixture
def build(home: Home, events: EventLog, outbox: FakeOutbox, write_config: Callable[[str], Path],
          start: Callable[[HandlerContext], Any]) -> Build:
    """Starts an Orchestrator whose senders may run `turns` agent turns a day."""

    async def started(turns: int, *, selector: str = "rules", agent: str = "echo",
                      providers: dict[str, ProviderSettings] | None = None,
                      builtins: dict[str, BuiltinProvider] | None = None) -> Orchestrator:
        write_config(CONFIG.format(selector=selector, agent=agent))
        usage = UsageSettings.model_validate({"limits": [{"per": "sender", "day": {"turns": turns}}]})
        settings = Settings(chat_tools=NO_CHAT_TOOLS,
                            providers=providers or {}, usage=usage, queue=QueueSettings(fsync=False))
        context = HandlerContext(home=home, settings=settings, events=events, outbox=outbox, queue_stats=dict,
                                 builtin_providers=builtins or {})
        return await start(context)  # type: ignore[no-any-return]

    return started


async def test_six_messages_of_one_sender_at_once_in_six_conversations_start_two_turns(
        build: Build, events: EventLog) -> None:
    loop = asyncio.get_running_loop()
    started: list[str] = []
    refused: list[dict[str, Any]] = []
    everyone = asyncio.Event()  # every one of the six started or was refused

    def settled() -> None:
        if len(started) + len(refused) == 6:
            everyone.set()

    def observe(event: dict[str, Any]) -> None:  # on the thread that checked the limit
        if event["event"] == "usage.limit_reached":
            loop.call_soon_threadsafe(lambda: (refused.append(event), settled()))

    async def gate(prompt: str, request: dict[str, Any]) -> str:
        """An agent that answers once each of the six has started or was refused."""
        started.append(prompt)
        settled()
        await asyncio.wait_for(everyone.wait(), 20)
        return f"done: {prompt}"

    events.observe(observe)
    orchestrator = await build(2, agent="gate", builtins={"gate": gate})
    answers = await asyncio.gather(*(orchestrator.handle(make_message(f"deploy {n}", conversationId=f"c{n}"))
                                     for n in range(6)))
    texts = [answer.message for [answer] in answers]
    assert len(started) == 2
    assert sum(text.startswith("done: deploy") for text in texts) == 2
    assert sum("You have reached the daily limit of 2 turns per sender" in text for text in texts) == 4


async def test_the_reservation_before_a_cli_selector_is_its_turn_counted_once(
        build: Build, tmp_path: Path, script: Callable[[str, str], list[str]]) -> None:
    selector = ScriptedSelector(tmp_path, script)
    selector.answer({"action": "command_invoke", "function": "list_workflows", "arguments": {}})
    orchestrator = await build(1, selector="picker", providers={"picker": selector.provider})
    [first] = await orchestrator.handle(make_message("what can you do?"))
    assert selector.calls == 1 and "chat" in first.message  # the one turn of the day: the selector's
    [second] = await orchestrator.handle(make_message("and now?", conversationId="c2"))
    assert "You have reached the daily limit of 1 turn per sender: 1 turn used" in second.message
    assert selector.calls == 1  # refused before the selector


async def test_a_built_in_selectors_decisions_leave_no_turn_running(build: Build) -> None:
    orchestrator = await build(1)
    for number in range(3):  # answered by the rules selector alone: no turn, nothing reserved
        [listing] = await orchestrator.handle(make_message(f"hello {number}", conversationId=f"c{number}"))
        assert "chat" in listing.message
    [answer] = await orchestrator.handle(make_message("deploy now"))
    assert answer.message == "deploy now"  # the day's one turn: the echo agent's
    [refused] = await orchestrator.handle(make_message("deploy again"))
    assert "You have reached the daily limit of 1 turn per sender" in refused.message
