"""The chat tools through the real MCP server and the `mcp` client: what a call may reach, what it sends."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.channelkit.attachments import attachment_folder
from gateway.home import Home
from gateway.models import IncomingPayload
from gateway.outbox import FileOutbox
from gateway.settings import ChatToolsSettings
from gateway.telemetry.events import EventLog
from gateway.testing import make_incoming, read_json_files
from orchestrator.chattools.client import ToolFailed, connected
from orchestrator.chattools.server import ChatToolServer
from orchestrator.chattools.tools import ChatTools

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def home(tmp_path: Path) -> Home:
    home = Home(tmp_path / "home")
    home.create()
    return home


@pytest.fixture
def events(home: Home) -> EventLog:
    return EventLog(home.root / "logs" / "events.jsonl")


@pytest.fixture
async def server(home: Home, events: EventLog) -> AsyncIterator[ChatToolServer]:
    outbox = FileOutbox(home, events, fsync=False)
    served = ChatToolServer(ChatTools(home, ChatToolsSettings(max_messages=3), outbox, events,
                                      file_limits={"telegram": 50 * 1024 * 1024}))  # as the telegram plugin declares
    await served.start()
    yield served
    await served.stop()
    outbox.close()


def _message(conversation: str, channel: str = "console") -> IncomingPayload:
    return make_incoming("hi", channel=channel, channelProfileId=channel, conversationId=conversation,
                         messageId=f"m-{conversation}")


def _granted(server: ChatToolServer, message: IncomingPayload, run: str = "r1") -> Any:
    scope = f"conv:{message.channel}/{message.profile}/{message.conversationId}"
    return server.granted(scope, scope, run_id=run, step_id="Reply", reply_to=message, agent="demo")


def _sent(home: Home) -> list[dict[str, Any]]:
    return sorted(read_json_files(home.outgoing), key=lambda p: p["timestamp"])


def _own_file(home: Home, message: IncomingPayload, name: str, size: int = 5) -> Path:
    folder = attachment_folder(home, message.profile, message.conversationId or "")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    with path.open("wb") as handle:
        handle.truncate(size)  # sparse: a 60 MB file costs nothing
    return path


async def test_send_message_goes_to_the_turns_conversation_in_order(server: ChatToolServer, home: Home) -> None:
    message = _message("A")
    async with _granted(server, message) as endpoint, connected(endpoint) as chat:
        assert set(await chat.names()) >= {"send_message", "send_file", "conversation_info"}
        for n in (1, 2, 3):
            await chat.call("send_message", text=f"part {n}")
    sent = _sent(home)
    assert [p["message"] for p in sent] == ["part 1", "part 2", "part 3"]
    assert {p["conversationId"] for p in sent} == {"A"} and {p["workflowRunId"] for p in sent} == {"r1"}


async def test_a_token_of_conversation_a_cannot_send_to_b(server: ChatToolServer, home: Home) -> None:
    a, b = _message("A"), _message("B")
    async with _granted(server, a) as token_a, _granted(server, b, run="r2"), connected(token_a) as chat:
        await chat.call("send_message", text="for A", conversationId="B", run="r2")  # arguments cannot redirect
        info = json.loads(await chat.call("conversation_info"))
    assert info["conversationId"] == "A" and info["runId"] == "r1"
    assert [(p["conversationId"], p["message"]) for p in _sent(home)] == [("A", "for A")]


async def test_a_token_the_server_never_issued_is_refused(server: ChatToolServer, home: Home) -> None:
    async with _granted(server, _message("A")) as endpoint:
        forged = type(endpoint)(endpoint.url, "not-a-token")
        async with connected(forged) as chat:
            with pytest.raises(ToolFailed, match="no valid chat tools token"):
                await chat.call("send_message", text="hello")
    assert _sent(home) == []


async def test_a_stopped_or_ended_turn_can_no_longer_send(server: ChatToolServer, home: Home) -> None:
    message = _message("A")
    async with _granted(server, message) as endpoint:
        server.revoke(endpoint)  # what /stop does (ProviderRunner._revoke)
        async with connected(endpoint) as chat:
            with pytest.raises(ToolFailed, match="no turn of this conversation is running"):
                await chat.call("send_message", text="after /stop")
    async with connected(endpoint) as chat:  # the turn ended
        with pytest.raises(ToolFailed, match="no turn"):
            await chat.call("send_message", text="after the end")
    assert _sent(home) == []


async def test_send_file_sends_a_file_of_the_conversation(server: ChatToolServer, home: Home) -> None:
    message = _message("A")
    path = _own_file(home, message, "report.txt")
    async with _granted(server, message) as endpoint, connected(endpoint) as chat:
        assert "sent report.txt" in await chat.call("send_file", path=str(path), caption="the report")
    [sent] = _sent(home)
    assert sent["files"] == [str(path)] and sent["message"] == "the report"


async def test_send_file_refuses_another_conversations_file_outside_the_home_and_links(
    server: ChatToolServer, home: Home, tmp_path: Path,
) -> None:
    message = _message("A")
    theirs = _own_file(home, _message("B"), "secret.txt")
    outside = tmp_path / "outside.txt"
    outside.write_text("x")
    link = _own_file(home, message, "ok.txt").parent / "link.txt"
    os.symlink(theirs, link)  # in A's own folder, pointing at B's file
    async with _granted(server, message) as endpoint, connected(endpoint) as chat:
        for path in (theirs, outside, link, Path("relative.txt")):
            with pytest.raises(ToolFailed):
                await chat.call("send_file", path=str(path))
    assert _sent(home) == []


async def test_a_60_mb_file_to_telegram_is_a_tool_error(server: ChatToolServer, home: Home) -> None:
    message = _message("A", channel="telegram")
    big = _own_file(home, message, "big.bin", size=60 * 1024 * 1024)
    async with _granted(server, message) as endpoint, connected(endpoint) as chat:
        with pytest.raises(ToolFailed, match="telegram takes files of up to 50 MB"):
            await chat.call("send_file", path=str(big))
        await chat.call("send_message", text="still here")  # the turn goes on
    assert [p["message"] for p in _sent(home)] == ["still here"]


async def test_a_turn_sends_at_most_max_messages(server: ChatToolServer, home: Home, events: EventLog) -> None:
    async with _granted(server, _message("A")) as endpoint, connected(endpoint) as chat:
        for n in range(3):
            await chat.call("send_message", text=f"m{n}")
        with pytest.raises(ToolFailed, match="at most 3 messages"):
            await chat.call("send_message", text="one too many")
    assert len(_sent(home)) == 3
    called = [json.loads(line) for line in events.path.read_text().splitlines()]
    results = [(e["tool"], e["result"]) for e in called if e["event"] == "chat_tool.called"]
    assert results == [*[("send_message", "ok")] * 3, ("send_message", "refused")]
    assert all(e["conversation"] == "conv:console/console/A" for e in called if e["event"] == "chat_tool.called")


async def test_conversation_info_gives_the_turns_conversation_and_its_recent_exchanges(
    home: Home, events: EventLog,
) -> None:
    histories = {"conv:console/console/A": [{"user": "my name is Ada", "assistant": "hello Ada"}]}
    served = ChatToolServer(ChatTools(home, ChatToolsSettings(), FileOutbox(home, events, fsync=False), events,
                                      history=lambda scope: histories.get(scope, [])))
    await served.start()
    try:
        async with _granted(served, _message("A")) as endpoint, connected(endpoint) as chat:
            info = json.loads(await chat.call("conversation_info"))
    finally:
        await served.stop()
    assert info["recentExchanges"] == histories["conv:console/console/A"]
    assert info["sender"] == "Ada" and info["channel"] == "console" and info["runId"] == "r1"
    assert Path(info["filesFolder"]) == attachment_folder(home, "console", "A")


async def test_conversation_info_names_the_roles_the_sender_holds(home: Home, events: EventLog) -> None:
    """The roles come from settings.yaml (gateway/roles.py), through the handler's `roles_of`."""
    from gateway.roles import RoleBook
    from gateway.settings import Settings

    settings = Settings.model_validate({"channels": [
        {"id": "tg", "type": "telegram", "token_env": "T", "roles": {"admin": ["ada"]}, "default_role": "guest"}]})
    book = RoleBook(settings)
    served = ChatToolServer(ChatTools(home, ChatToolsSettings(), FileOutbox(home, events, fsync=False), events,
                                      roles_of=lambda message: book.grant_of(message).roles))
    await served.start()
    found = []
    try:
        for sender in ("ada", "bob"):
            message = make_incoming("hi", channel="telegram", channelProfileId="tg", conversationId="c1",
                                    senderId=sender, messageId=f"m-{sender}")
            async with _granted(served, message) as endpoint, connected(endpoint) as chat:
                found.append(json.loads(await chat.call("conversation_info"))["roles"])
    finally:
        await served.stop()
    assert found == [["admin"], ["guest"]]
