"""The gateway in-process: channels wired to the queue, typing, disabled channels, event observers, secrets."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway import hookimpl
from gateway.app import Gateway, run_gateway
from gateway.home import Home
from gateway.models import IncomingPayload, OutgoingPayload
from gateway.plugin_manager import build_plugin_manager
from gateway.settings import ChannelProfile, QueueSettings, Settings
from gateway.telemetry.events import read_events
from gateway.testing import FakeChannel, async_wait_until, drop_incoming, make_incoming
from tests.fakes.channels import FakeChannelPlugin
from tests.fakes.orchestrator import NO_CHAT_TOOLS


@pytest.fixture
async def running(home: Home, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[Gateway, FakeChannelPlugin]]:
    monkeypatch.setenv("FAKE_TOKEN", "s3cr3t-t0ken")
    plugin = FakeChannelPlugin()
    settings = Settings(
        queue=QueueSettings(fsync=False), chat_tools=NO_CHAT_TOOLS,
        channels=[ChannelProfile(id="f1", type="fake", token_env="FAKE_TOKEN"),
                  ChannelProfile(id="broken", type="fake", fail=True, token_env="FAKE_TOKEN")],
    )
    gateway = Gateway(home, settings, build_plugin_manager(settings, extra=[plugin]))
    await gateway.start()
    yield gateway, plugin
    await gateway.stop()


async def test_a_channel_message_is_answered_through_the_same_channel(running) -> None:
    gateway, plugin = running
    channel = plugin.channels["f1"]
    await channel.inject("hello gateway", conversationId="room")
    sent = await async_wait_until(lambda: channel.sent)
    assert sent[0].message == "You said: hello gateway" and sent[0].conversationId == "room"
    assert channel.typing_calls == ["room"]


async def test_a_stopped_gateway_leaves_no_spare_files(home: Home) -> None:
    settings = Settings(chat_tools=NO_CHAT_TOOLS,
                        queue=QueueSettings(fsync=False), channels=[ChannelProfile(id="f1", type="fake")])
    plugin = FakeChannelPlugin()
    gateway = Gateway(home, settings, build_plugin_manager(settings, extra=[plugin]))
    await gateway.start()
    await plugin.channels["f1"].inject("hello", conversationId="room")
    await async_wait_until(lambda: plugin.channels["f1"].sent)
    assert list(home.incoming.glob(".spare.*.tmp")) and list(home.outgoing.glob(".spare.*.tmp"))
    await gateway.stop()
    assert not list(home.queue.rglob(".spare.*"))


async def test_a_failing_channel_is_disabled_without_leaking_its_token(running, home: Home) -> None:
    gateway, plugin = running
    assert gateway.channel_status["broken"]["state"] == "disabled"
    assert "s3cr3t-t0ken" not in gateway.channel_status["broken"]["reason"]
    assert gateway.channel_status["f1"]["state"] == "running"
    disabled = [e for e in plugin.events if e["event"] == "channel.disabled"]
    assert disabled
    await async_wait_until(lambda: "channel.disabled" in home.events_file.read_text(), 5)  # written per turn
    assert "***" in home.events_file.read_text()
    assert "s3cr3t-t0ken" not in home.events_file.read_text()


async def test_switchyard_event_observers_see_every_event(running) -> None:
    _, plugin = running
    assert "gateway.started" in [e["event"] for e in plugin.events]


async def test_status_file_lists_the_channels(running, home: Home) -> None:
    status = json.loads((home.state / "gateway.json").read_text())
    assert status["channels"]["f1"]["state"] == "running" and status["watch"] in ("inotify", "polling")


async def test_polling_fallback_still_processes_dropped_files(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHYARD_FORCE_POLLING", "1")
    plugin = FakeChannelPlugin()
    settings = Settings(chat_tools=NO_CHAT_TOOLS,
                        queue=QueueSettings(fsync=False, poll_ms=20), channels=[ChannelProfile(id="f1", type="fake")])
    gateway = Gateway(home, settings, build_plugin_manager(settings, extra=[plugin]))
    await gateway.start()
    try:
        await plugin.channels["f1"].inject("polled")
        await async_wait_until(lambda: plugin.channels["f1"].sent)
        assert gateway._watches[0].mode == "polling"
    finally:
        await gateway.stop()


class GatedHandler:
    """A handler that answers only when the test opens the gate."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()

    @hookimpl
    def switchyard_handler(self, context: Any) -> GatedHandler:
        return self

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def handle(self, message: IncomingPayload) -> list[OutgoingPayload]:
        await self.gate.wait()
        return [OutgoingPayload.reply_to(message, "done", agent="gated", timestamp=message.timestamp)]


async def test_typing_is_repeated_while_processing_and_stops_after(home: Home, monkeypatch) -> None:
    monkeypatch.setattr("gateway.app.TYPING_REFRESH_S", 0.01)
    channels, handler = FakeChannelPlugin(), GatedHandler()
    settings = Settings(chat_tools=NO_CHAT_TOOLS,
                        queue=QueueSettings(fsync=False), channels=[ChannelProfile(id="f1", type="fake")])
    gateway = Gateway(home, settings, build_plugin_manager(settings, extra=[channels, handler]))
    await gateway.start()
    try:
        channel = channels.channels["f1"]
        await channel.inject("take your time", conversationId="slow-room")
        await async_wait_until(lambda: len(channel.typing_calls) >= 3)
        handler.gate.set()
        await async_wait_until(lambda: channel.sent)
        settled = len(channel.typing_calls)
        await asyncio.sleep(0.05)  # several refresh periods: no call may follow the answer
        assert len(channel.typing_calls) == settled
    finally:
        await gateway.stop()


async def test_a_refusing_disk_is_retried_before_a_channel_message_is_given_up(running, monkeypatch) -> None:
    gateway, plugin = running
    real_enqueue, refusals = gateway.queue.enqueue, [OSError(errno.ENOSPC, "No space left on device")] * 2

    def full_then_free(data: bytes, *, hint: str = "msg"):
        if refusals:
            raise refusals.pop()
        return real_enqueue(data, hint=hint)

    monkeypatch.setattr(gateway.queue, "enqueue", full_then_free)
    await plugin.channels["f1"].inject("kept despite the full disk")
    sent = await async_wait_until(lambda: plugin.channels["f1"].sent)
    assert sent[0].message == "You said: kept despite the full disk"
    assert [e for e in plugin.events if e["event"] == "queue.error"]


async def test_a_channel_whose_platform_is_down_at_start_is_retried_and_gets_its_replies(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("gateway.app.CHANNEL_RETRY_INITIAL_S", 0.01)
    plugin = FakeChannelPlugin()
    plugin.outages["late"] = 2
    settings = Settings(chat_tools=NO_CHAT_TOOLS,
                        queue=QueueSettings(fsync=False), channels=[ChannelProfile(id="late", type="fake")])
    gateway = Gateway(home, settings, build_plugin_manager(settings, extra=[plugin]))
    await gateway.start()
    try:
        assert gateway.channel_status["late"]["state"] == "retrying"
        incoming = make_incoming("sent while the platform was down", channel="fake", channelProfileId="late")
        drop_incoming(home, incoming, "early.json")
        await async_wait_until(lambda: "late" in plugin.channels and plugin.channels["late"].sent)
        assert plugin.channels["late"].sent[0].message == "You said: sent while the platform was down"
        assert gateway.channel_status["late"]["state"] == "running"
        assert [e["attempt"] for e in plugin.events if e["event"] == "channel.retrying"] == [1, 2]
    finally:
        await gateway.stop()


class _ReportingChannels:
    """Provides `fake` channels and keeps each one's context, to report as the channel would."""

    def __init__(self) -> None:
        self.contexts: dict[str, Any] = {}

    @hookimpl
    def switchyard_channels(self, profile: ChannelProfile, context: Any) -> FakeChannel | None:
        self.contexts[profile.id] = context
        return FakeChannel("fake", profile.id) if profile.type == "fake" else None


async def test_a_channel_that_ends_by_itself_stops_the_gateway_only_when_no_other_channel_runs(home: Home) -> None:
    plugin = _ReportingChannels()
    settings = Settings(chat_tools=NO_CHAT_TOOLS, queue=QueueSettings(fsync=False),
                        channels=[ChannelProfile(id="a", type="fake"), ChannelProfile(id="b", type="fake")])
    stop = asyncio.Event()
    gateway = Gateway(home, settings, build_plugin_manager(settings, extra=[plugin]), request_stop=stop.set)
    task = asyncio.create_task(run_gateway(gateway, stop))
    try:
        await async_wait_until(lambda: len(gateway.channels) == 2, 10)
        plugin.contexts["b"].note("2 files ignored")
        plugin.contexts["a"].ended("end of input")
        status = json.loads((home.state / "gateway.json").read_text())["channels"]
        assert status["a"] == {"type": "fake", "state": "stopped", "reason": "end of input"}
        assert status["b"] == {"type": "fake", "state": "running", "reason": "2 files ignored"}
        assert not stop.is_set()
        plugin.contexts["b"].ended("closed")
        assert stop.is_set()
        await asyncio.wait_for(task, 30)
    finally:
        stop.set()
        await task
    assert [e["profile"] for e in read_events(home.events_file) if e["event"] == "channel.stopped"] == ["a", "b"]


class RecordingGatedHandler(GatedHandler):
    """A GatedHandler that records the messages in the order it starts them; only `hold` waits for the gate."""

    def __init__(self) -> None:
        super().__init__()
        self.started: list[str] = []

    async def handle(self, message: IncomingPayload) -> list[OutgoingPayload]:
        self.started.append(message.message)
        if message.message == "hold":
            await self.gate.wait()
        return [OutgoingPayload.reply_to(message, "done", agent="gated", timestamp=message.timestamp)]


async def test_a_file_dropped_after_a_clock_step_back_does_not_overtake_its_conversation(home: Home) -> None:
    handler = RecordingGatedHandler()
    settings = Settings(chat_tools=NO_CHAT_TOOLS, queue=QueueSettings(fsync=False))
    gateway = Gateway(home, settings, build_plugin_manager(settings, extra=[handler]))
    await gateway.start()
    try:
        drop_incoming(home, make_incoming("hold", conversationId="room"), "hold.json")
        await async_wait_until(lambda: handler.started == ["hold"])  # the conversation is busy: A and B wait
        drop_incoming(home, make_incoming("A", conversationId="room"), "a.json")
        tmp = home.incoming / "b.json.tmp"  # B appears with an mtime one hour old: the clock stepped back
        tmp.write_bytes(make_incoming("B", conversationId="room").to_json())
        stepped = time.time_ns() - 3600 * 10**9
        os.utime(tmp, ns=(stepped, stepped))
        tmp.rename(home.incoming / "b.json")
        await async_wait_until(lambda: not list(home.incoming.glob("*.json")))  # both taken in line
        handler.gate.set()
        await async_wait_until(lambda: len(handler.started) == 3)
    finally:
        await gateway.stop()
    assert handler.started == ["hold", "A", "B"]
