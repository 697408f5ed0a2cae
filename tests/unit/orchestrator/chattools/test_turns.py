"""The chat tools of turns as ProviderRunner runs them: a workflow step's turn gets them, `/stop` takes them."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.home import Home
from gateway.settings import ChatToolsSettings
from gateway.telemetry.events import EventLog
from gateway.testing import async_wait_until, make_incoming
from orchestrator.agents.live import TurnStopped
from orchestrator.agents.providers import ProviderRunner
from orchestrator.agents.request import TurnRequest
from orchestrator.chattools.client import ToolFailed, connected
from orchestrator.chattools.server import ChatToolServer, ToolEndpoint
from orchestrator.chattools.tools import ChatTools
from tests.fakes.orchestrator import FakeOutbox
from tests.fakes.stores import file_sessions

pytestmark = pytest.mark.timeout(30)
SCOPE = "conv:console/console/c1"


@pytest.fixture
async def server(home: Home, events: EventLog, outbox: FakeOutbox) -> AsyncIterator[ChatToolServer]:
    served = ChatToolServer(ChatTools(home, ChatToolsSettings(), outbox, events))
    await served.start()
    yield served
    await served.stop()


def _step(tmp_path: Path, **fields: Any) -> TurnRequest:
    message = make_incoming("go", conversationId="c1").model_dump(exclude_none=True)
    return TurnRequest("go", tmp_path, request={"message": message, "stepId": "Reply", "runId": "r1"},
                       conversation=SCOPE, run="r1", **fields)


async def test_a_turn_stopped_by_stop_can_no_longer_send(
    home: Home, server: ChatToolServer, outbox: FakeOutbox, tmp_path: Path,
) -> None:
    """An agent that goes on after `/stop` (here: a built-in that catches its cancellation) is refused."""
    after_stop: list[str] = []
    started = asyncio.Event()

    async def stubborn(prompt: str, request: dict[str, Any]) -> str:
        endpoint = ToolEndpoint(request["chatTools"]["url"], request["chatTools"]["token"])
        async with connected(endpoint) as chat:
            await chat.call("send_message", text="before /stop")
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                try:
                    after_stop.append(await chat.call("send_message", text="after /stop"))
                except ToolFailed as exc:
                    after_stop.append(f"refused: {exc}")
                raise
        return "never"

    runner = ProviderRunner(home, {}, {"stubborn": stubborn}, sessions=file_sessions(home), chat_tools=server)
    turn = asyncio.create_task(runner.run("stubborn", _step(tmp_path)))
    await asyncio.wait_for(started.wait(), 10)
    assert await runner.turns.stop(SCOPE) == 1
    with pytest.raises(TurnStopped):
        await turn
    await async_wait_until(lambda: after_stop)
    assert after_stop == ["refused: Error executing tool send_message: no turn of this conversation is running "
                          "(it ended or was stopped)"]
    assert [p.message for p in outbox.payloads] == ["before /stop"]


async def test_the_selector_and_an_agent_with_chat_tools_false_get_no_tools(
    home: Home, server: ChatToolServer, tmp_path: Path,
) -> None:
    seen: list[Any] = []

    async def agent(prompt: str, request: dict[str, Any]) -> str:
        seen.append(request.get("chatTools"))
        return "ok"

    runner = ProviderRunner(home, {}, {"agent": agent}, sessions=file_sessions(home), chat_tools=server)
    await runner.run("agent", _step(tmp_path))
    await runner.run("agent", _step(tmp_path, chat_tools=False))
    await runner.run("agent", TurnRequest("pick one", tmp_path, request={"allowedActions": []}))  # the selector
    assert seen[0] is not None and seen[0]["url"] == server.url
    assert seen[1:] == [None, None]


async def test_a_turn_granted_while_the_server_starts_waits_for_it_and_echo_waits_for_nothing(
    home: Home, tmp_path: Path, outbox: FakeOutbox, events: EventLog,
) -> None:
    """`start_soon` does not hold up the gateway's start: a turn that gets tools while the server is still
    starting waits for it and gets a working endpoint; a built-in that never calls the tools gets none."""
    served = ChatToolServer(ChatTools(home, ChatToolsSettings(), outbox, events))
    seen: list[Any] = []

    async def agent(prompt: str, request: dict[str, Any]) -> str:
        seen.append(request.get("chatTools"))
        return "ok"

    runner = ProviderRunner(home, {}, {"agent": agent, "echo": agent}, sessions=file_sessions(home),
                            chat_tools=served)
    served.start_soon()
    try:
        await runner.run("echo", _step(tmp_path))
        await runner.run("agent", _step(tmp_path))
    finally:
        await served.stop()
    assert seen[0] is None, "echo was granted tools (and made to wait for the server)"
    assert seen[1] is not None and seen[1]["url"].startswith("http://127.0.0.1:")


async def test_a_server_that_cannot_start_leaves_turns_without_tools(
    home: Home, tmp_path: Path, outbox: FakeOutbox, events: EventLog, caplog: pytest.LogCaptureFixture,
) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    served = ChatToolServer(ChatTools(home, ChatToolsSettings(), outbox, events), port=taken.getsockname()[1])
    seen: list[Any] = []

    async def agent(prompt: str, request: dict[str, Any]) -> str:
        seen.append(request.get("chatTools"))
        return "ok"

    runner = ProviderRunner(home, {}, {"agent": agent}, sessions=file_sessions(home), chat_tools=served)
    served.start_soon()
    try:
        assert (await runner.run("agent", _step(tmp_path))).stdout == "ok"
    finally:
        await served.stop()
        taken.close()
    assert seen == [None]
    assert "the chat tools server did not start" in caplog.text


async def test_started_returns_once_a_server_started_in_the_background_listens(
    home: Home, outbox: FakeOutbox, events: EventLog,
) -> None:
    """What the bench's rig waits for before it times anything: at once for a server never started, else until
    the one `start_soon` began listens."""
    served = ChatToolServer(ChatTools(home, ChatToolsSettings(), outbox, events))
    await asyncio.wait_for(served.started(), 1)
    assert served.url is None
    served.start_soon()
    try:
        await served.started()
        assert served.url is not None and served.url.startswith("http://127.0.0.1:")
    finally:
        await served.stop()
