"""Chat commands through the real Gateway and the real orchestrator on each backend (memory, files, postgres
when SWITCHYARD_TEST_DSN is set), while a conversation's message waits for its run, whose one step is a
built-in provider that answers only once the test releases it (issue 32 §8 and §16). The memory backend
declares no orchestrator store of its own: there its gateway (queue, keys, receipts) runs the orchestrator
with the file backend's stores on its home (OrchestratorOnMemory).


- `/status`, `/help` and `/usage` are answered before that message ends (they hold the conversation's
  control key, gateway.payloads), `/status` showing the running run; a plain message still waits behind it,
  with its "queued behind" receipt;
- `/stop` answers once: its reply, and no "was cancelled" result after it; `/status` later keeps its
  fixed sentence and names the conversation's last run on a line of its own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway import hookimpl
from gateway.app import Gateway
from gateway.backends.memory.backend import MemoryBackendPlugin, memory_settings
from gateway.home import Home
from gateway.models import IncomingPayload, OutgoingPayload
from gateway.payloads import receipt_text
from gateway.plugin_manager import build_plugin_manager
from gateway.settings import ChannelProfile, QueueSettings, Settings
from gateway.testing import FakeChannel, async_wait_until, make_incoming
from orchestrator.runs.state import run_id_for
from orchestrator.storage.stores import file_stores, open_run_store

pytestmark = pytest.mark.timeout(90)

PROFILE = "chat"
NO_RUN = "no active workflow run found for this conversation"
QUEUE = {"fsync": False, "poll_ms": 50, "backoff_initial_ms": 100, "backoff_max_ms": 200, "max_concurrency": 8,
         "receipt_after_sec": 0.3, "lease_sec": 2}
ORCHESTRATOR = {
    "selector": {"provider": "rules"}, "diagnostics": {"provider": "rules"},
    "rules": {"default_workflow": "chat"}, "reply_within_sec": 60, "progress_after_sec": 600, "stream": False,
    "agents": {"helper": {"provider": "slow", "prompt": "{{message}}"}},
    "workflows": {"chat": {"description": "Reply", "steps": [{"id": "Reply", "agent": "helper"}]}},
}
WITHIN_S = 20.0


@dataclass
class Slow:
    """A built-in provider that answers its prompt only once `release` is set; records each prompt."""

    prompts: list[str] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, prompt: str, request: dict[str, Any]) -> str:
        self.prompts.append(prompt)
        await self.release.wait()
        return f"answered: {prompt}"


class ChatPlugin:
    """The fake chat channel and the `slow` provider."""

    def __init__(self, slow: Slow):
        self.slow = slow
        self.channel: FakeChannel | None = None

    @hookimpl
    def switchyard_channels(self, profile: ChannelProfile, context: Any) -> FakeChannel | None:
        if profile.type != "fake":
            return None
        self.channel = FakeChannel("fake", profile.id)
        return self.channel

    @hookimpl
    def switchyard_providers(self) -> dict[str, Any]:
        return {"slow": self.slow}


class OrchestratorOnMemory:
    """The orchestrator's file stores (runs, sessions, …) declared on the memory backend too."""

    @hookimpl
    def switchyard_stores(self) -> dict[str, dict[str, Any]]:
        return {name: {"memory": by_backend["files"]} for name, by_backend in file_stores().items()}


@dataclass
class Chat:
    """One started Gateway with the orchestrator, its channel and its slow provider."""

    gateway: Gateway
    plugin: ChatPlugin
    slow: Slow

    @property
    def channel(self) -> FakeChannel:
        assert self.plugin.channel is not None
        return self.plugin.channel

    async def say(self, text: str, message_id: str, conversation: str = "room") -> IncomingPayload:
        """One inbound message, as the platform hands it over."""
        payload = make_incoming(text, channel="fake", channelProfileId=PROFILE, conversationId=conversation,
                                messageId=message_id)
        await async_wait_until(lambda: self.plugin.channel is not None and self.channel.sink is not None)
        assert self.channel.sink is not None
        await self.channel.sink(payload)
        return payload

    def sent(self, conversation: str = "room") -> list[OutgoingPayload]:
        return [reply for reply in self.channel.sent if reply.conversationId == conversation]

    def answers(self, message_id: str) -> list[str]:
        """The texts sent in reply to one message, receipts left out."""
        return [r.message for r in self.sent() if r.messageId == message_id and not _receipt(r)]

    async def answer(self, message_id: str) -> str:
        """The one answer to a message, once it is sent."""
        await async_wait_until(lambda: self.answers(message_id), WITHIN_S)
        [text] = self.answers(message_id)
        return text


def _receipt(reply: OutgoingPayload) -> bool:
    return reply.message.startswith("queued behind")


@pytest.fixture(params=["memory", "files", "postgres"])
async def chat(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Chat]:
    queue: dict[str, Any] = dict(QUEUE)
    if request.param == "postgres":
        monkeypatch.setenv("SWITCHYARD_DSN", request.getfixturevalue("db"))
        queue["backend"] = "postgres"
    settings = Settings(queue=QueueSettings(**queue), channels=[ChannelProfile(id=PROFILE, type="fake")])
    slow = Slow()
    plugin = ChatPlugin(slow)
    extra: list[object] = [plugin]
    if request.param == "memory":
        settings = memory_settings(settings)
        extra += [MemoryBackendPlugin(), OrchestratorOnMemory()]
    home = Home(tmp_path / "home")
    workspace = home.root / "orchestrators" / "main"
    workspace.mkdir(parents=True)
    (workspace / "orchestrator.yaml").write_text(yaml.safe_dump(ORCHESTRATOR, sort_keys=False))
    gateway = Gateway(home, settings, build_plugin_manager(settings, extra=extra), role="run")
    await gateway.start()
    try:
        yield Chat(gateway, plugin, slow)
    finally:
        slow.release.set()  # nothing left waiting on it when the gateway stops
        await gateway.stop()


async def test_status_help_and_usage_are_answered_while_the_conversations_message_runs_and_others_wait(
        chat: Chat) -> None:
    long = await chat.say("think about it", "m-long")
    await async_wait_until(lambda: chat.slow.prompts == ["think about it"], WITHIN_S)
    await chat.say("and then this", "m-next")
    await chat.say("/status", "m-status")
    await chat.say("/help@switchyard_bot", "m-help")
    await chat.say("/USAGE", "m-usage")

    status = await chat.answer("m-status")
    run_id = run_id_for(long)
    assert status.startswith(f"Run {run_id} (workflow chat): running, step 1/1 Reply"), status
    assert "Workflows you can start:" in await chat.answer("m-help")
    assert await chat.answer("m-usage")
    receipt = receipt_text(1)
    await async_wait_until(lambda: [r.message for r in chat.sent() if r.messageId == "m-next"] == [receipt],
                           WITHIN_S)
    assert chat.answers("m-long") == [] and chat.answers("m-next") == [], "the commands waited for the run"
    assert chat.slow.prompts == ["think about it"], "the plain message did not wait behind the running one"
    assert not [r for r in chat.sent() if _receipt(r) and r.messageId != "m-next"], "a command was queued"

    chat.slow.release.set()
    assert await chat.answer("m-long") == "answered: think about it"
    assert await chat.answer("m-next") == "answered: and then this"
    texts = [r.message for r in chat.sent() if not _receipt(r)]
    assert texts.index("answered: think about it") < texts.index("answered: and then this")


async def test_stop_answers_once_and_status_then_names_the_conversations_last_run(chat: Chat) -> None:
    long = await chat.say("think about it", "m-long")
    await async_wait_until(lambda: chat.slow.prompts == ["think about it"], WITHIN_S)
    await chat.say("/stop", "m-stop")
    run_id = run_id_for(long)
    assert await chat.answer("m-stop") == f"Stopped. Cancelled run {run_id} (workflow chat)."

    chat.slow.release.set()
    after = await chat.say("and now this", "m-after")  # behind m-long: whatever m-long still sent comes first
    assert await chat.answer("m-after") == "answered: and now this"
    texts = [r.message for r in chat.sent()]
    assert texts == [f"Stopped. Cancelled run {run_id} (workflow chat).", "answered: and now this"], \
        "the stopped run answered a second time"
    stored = open_run_store(chat.gateway.backend).load(run_id)
    assert stored is not None and (stored.state, stored.delivery) == ("cancelled", "told")

    await chat.say("/status", "m-status")
    first, last = (await chat.answer("m-status")).splitlines()
    assert first == NO_RUN
    assert last.startswith(f"Last run: {run_id_for(after)} (workflow chat) done "), last
    await chat.say("/status", "m-elsewhere", conversation="other-room")
    await async_wait_until(lambda: chat.sent("other-room"), WITHIN_S)
    assert [r.message for r in chat.sent("other-room")] == [NO_RUN], "another conversation's run was shown"
