"""The chat tool `ask` on a running gateway: its question reaches the chat with buttons, an allowed sender's
answer returns to the agent, another's is refused, and no answer in time returns "no answer"."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.home import Home
from gateway.testing import make_incoming
from orchestrator.chattools.client import connected
from tests.unit.orchestrator.chat.test_approvals import Running

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
async def running(home: Home) -> AsyncIterator[Running]:
    gateway = Running(home, approvers=["ada"], chat_tools=True)  # ada and bob may talk, only ada may answer
    await gateway.gateway.start()
    yield gateway
    await gateway.gateway.stop()


def _asking(running: Running, question: str, **arguments: Any) -> asyncio.Task[str]:
    """A turn of a run answering ada's message in `room` calls `ask` over MCP."""
    message = make_incoming("plan it", channel="fake", channelProfileId="f1", conversationId="room",
                            senderId="ada", sender="Ada")

    async def turn() -> str:
        server = running.orchestrator.chat_tools
        async with server.granted("conv:fake/f1/room", None, run_id="r1", step_id="Plan", reply_to=message,
                                  agent="planner") as endpoint:
            assert endpoint is not None
            async with connected(endpoint) as chat:
                return await chat.call("ask", question=question, **arguments)

    return asyncio.create_task(turn())


async def test_the_answer_of_an_allowed_sender_returns_to_the_agent(running: Running) -> None:
    asked = _asking(running, "Which branch?", options=["main", "develop"])
    question = await running.question()
    assert question.message.startswith("❓ Which branch?") and question.conversationId == "room"
    assert [b.label for b in question.buttons] == ["main", "develop"]
    await running.say("2", sender="bob")  # may talk, may not answer
    await running.reply_containing("You may not answer this request.")
    assert not asked.done()
    await running.say("develop", button=question.buttons[1].id)
    assert await asyncio.wait_for(asked, 10) == "develop"
    await running.reply_containing("Answered: develop")


async def test_no_answer_in_time_returns_no_answer(running: Running) -> None:
    running.orchestrator.chat_tools.tools.reconfigure(
        running.settings.chat_tools.model_copy(update={"ask_timeout_sec": 0.3}))
    asked = _asking(running, "Deploy now?")
    question = await running.question()
    assert [b.label for b in question.buttons] == ["Yes", "No"]
    assert await asyncio.wait_for(asked, 10) == "no answer"
    await running.reply_containing("⌛ No answer in time: Deploy now?")
