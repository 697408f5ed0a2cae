"""A multi-part reply whose delivery stops after its first part goes on where it stopped when delivery starts
again (the journal of gateway/channelkit/delivery.py: each part sent once, none left out), through the real
Gateway of each backend (memory, files, postgres when SWITCHYARD_TEST_DSN is set): a channel that sends each
`|`-separated piece of a reply as one part, a host stopped while it sends the second part (a send that never
returns, cancelled by the stop as a killed process's), then a fresh host on the same backend state and home.

tests/contract/test_journal.py holds the journal stores to this; here it is each backend's delivery: on memory
and files the reply is a file of the home and the channel's DeliveryJournal is in the home (the memory backend
has no outbox: a host on another home never sees the reply, so the fresh host is on the same home); on
postgres the reply and its sent parts are the outbox row (rows.py RowJournal)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import gateway.app
from gateway import hookimpl
from gateway.api import ChannelContext, DeliveryRecord
from gateway.app import Gateway
from gateway.backends.memory.backend import MemoryBackendPlugin, memory_settings
from gateway.channelkit.delivery import DeliveryJournal, Part, deliver_parts
from gateway.home import Home
from gateway.models import IncomingPayload, OutgoingPayload
from gateway.plugin_manager import build_plugin_manager
from gateway.settings import ChannelProfile, QueueSettings, Settings
from gateway.telemetry.events import read_events
from gateway.testing import async_wait_until, make_incoming

pytestmark = pytest.mark.timeout(60)

PROFILE = "p1"
ANSWER = "one|two|three"


class PartsChannel:
    """Sends each `|`-separated piece of a reply as one part, journaled as a platform plugin does; a part in
    `hang_on` is never sent (its send does not return)."""

    name = "parts"

    def __init__(self, context: ChannelContext, sent: list[str], hang_on: set[str]):
        self.profile_id = context.profile.id
        self.journal = DeliveryJournal(context.home, self.profile_id)
        self.sent = sent
        self.hang_on = hang_on
        self.hanging = False
        self.sink: Any = None

    async def start(self, sink: Any) -> None:
        self.sink = sink

    async def stop(self) -> None: ...

    async def send(self, outgoing: OutgoingPayload) -> DeliveryRecord:
        async def send_part(part: Part) -> str:
            if part.text in self.hang_on:
                self.hanging = True
                await asyncio.Event().wait()
            self.sent.append(part.text or "")
            return f"platform-{part.index}"

        parts = [Part(index, text=text) for index, text in enumerate(outgoing.message.split("|"))]
        return await deliver_parts(outgoing, parts, send_part, self.journal)


class PartsHost:
    """One host's plugin: its PartsChannel and a handler that answers every message with ANSWER."""

    def __init__(self, sent: list[str], hang_on: set[str]):
        self.sent = sent
        self.hang_on = hang_on
        self.channel: PartsChannel | None = None

    @hookimpl
    def switchyard_channels(self, profile: ChannelProfile, context: ChannelContext) -> PartsChannel | None:
        if profile.type != "parts":
            return None
        self.channel = PartsChannel(context, self.sent, self.hang_on)
        return self.channel

    @hookimpl
    def switchyard_handler(self, context: Any) -> PartsHost:
        return self

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def handle(self, message: IncomingPayload) -> list[OutgoingPayload]:
        return [OutgoingPayload.reply_to(message, ANSWER, agent="script", timestamp=message.timestamp)]


@pytest.fixture(params=["memory", "files", "postgres"])
def start_host(request: pytest.FixtureRequest, tmp_path: Path,
               monkeypatch: pytest.MonkeyPatch) -> Callable[[PartsHost], Awaitable[Gateway]]:
    """Starts a Gateway of this backend on one shared state and home, with `plugin` as its channel and handler."""
    queue: dict[str, Any] = {"fsync": False, "poll_ms": 50, "receipt_after_sec": 0, "lease_sec": 1}
    if request.param == "postgres":
        monkeypatch.setenv("SWITCHYARD_DSN", request.getfixturevalue("db"))
        queue["backend"] = "postgres"
    settings = Settings(queue=QueueSettings(**queue), channels=[ChannelProfile(id=PROFILE, type="parts")])
    memory = MemoryBackendPlugin()
    if request.param == "memory":
        settings = memory_settings(settings)
    extra: list[object] = [memory] if request.param == "memory" else []
    monkeypatch.setattr(gateway.app, "SHUTDOWN_GRACE_S", 0.0)  # the hanging part is cancelled after 1 s, not 10
    home = Home(tmp_path / "home")

    async def start(plugin: PartsHost) -> Gateway:
        host = Gateway(home, settings, build_plugin_manager(settings, extra=[plugin, *extra]))
        await host.start()
        await async_wait_until(lambda: plugin.channel is not None and plugin.channel.sink is not None)
        return host

    return start


async def test_a_reply_stopped_after_its_first_part_sends_only_the_rest_after_a_restart(
        start_host: Callable[[PartsHost], Awaitable[Gateway]]) -> None:
    sent: list[str] = []
    first = PartsHost(sent, hang_on={"two"})
    host = await start_host(first)
    assert first.channel is not None
    await first.channel.sink(make_incoming("hi", channel="parts", channelProfileId=PROFILE, conversationId="c1"))
    await async_wait_until(lambda: first.channel is not None and first.channel.hanging)
    await host.stop()
    assert sent == ["one"]

    second = PartsHost(sent, hang_on=set())
    host = await start_host(second)
    try:
        await async_wait_until(lambda: any(e["event"] == "outgoing.sent" for e in read_events(host.home.events_file)))
    finally:
        await host.stop()
    assert sent == ["one", "two", "three"], "each part sent once, none left out"
