"""A fake `bench` channel as a plugin: records what it is asked to send; no network, no cost.

Loaded in-process by the rig, or in a `switchyard run` process via SWITCHYARD_PLUGINS=bench.plugin.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from gateway import ChannelContext, ChannelOptions, ChannelProfile, DeliveryRecord, OutgoingPayload, Sink, hookimpl
from gateway.api import HandlerContext
from gateway.models import IncomingPayload

CHANNEL_TYPE = "bench"
REPLY_TEXT = "Workflows you can start:\n- (none)\nCommands: /status, /cancel, /help"


class BenchChannel:
    """Keeps the sink for the producer and notes (conversation, messageId, time) of each send."""

    name = CHANNEL_TYPE
    takes_receipts = False  # it counts deliveries: a "queued behind" receipt would be taken for a reply

    def __init__(self, profile_id: str, expected: int = 0):
        self.profile_id = profile_id
        self.sink: Sink | None = None
        self.delivered: list[tuple[str, str, int]] = []
        self.expected = expected
        self.done = asyncio.Event()

    def expect(self, count: int) -> None:
        """Sets how many sends complete the current batch (and clears the record)."""
        self.delivered.clear()
        self.expected = count
        self.done.clear()

    async def start(self, sink: Sink) -> None:
        self.sink = sink

    async def send(self, outgoing: OutgoingPayload) -> DeliveryRecord | None:
        self.delivered.append((outgoing.conversationId or "", outgoing.messageId, time.perf_counter_ns()))
        if self.expected and len(self.delivered) >= self.expected:
            self.done.set()
        return None

    async def stop(self) -> None:
        return None


class BenchPlugin:
    """Declares the `bench` channel type and keeps the channels it built."""

    def __init__(self, expected: int = 0) -> None:
        self.expected = expected
        self.channels: list[BenchChannel] = []

    @hookimpl
    def switchyard_channel_types(self) -> list[str]:
        return [CHANNEL_TYPE]

    @hookimpl
    def switchyard_channels(self, profile: ChannelProfile, context: ChannelContext) -> BenchChannel | None:
        if profile.type != CHANNEL_TYPE:
            return None
        channel = BenchChannel(profile.id, self.expected)
        self.channels.append(channel)
        return channel


class NullHandler:
    """Answers every message at once, in process: the gateway's own cost without the orchestrator."""

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def handle(self, message: IncomingPayload) -> list[OutgoingPayload]:
        return [OutgoingPayload.reply_to(message, REPLY_TEXT, agent="null", timestamp=message.timestamp)]


class NullHandlerPlugin:
    """Provides the NullHandler (registered after the orchestrator plugin, so it is asked first)."""

    @hookimpl
    def switchyard_handler(self, context: HandlerContext) -> NullHandler:
        return NullHandler()


_MODULE_PLUGIN = BenchPlugin()


@hookimpl
def switchyard_handler(context: HandlerContext) -> NullHandler | None:
    """The NullHandler when BENCH_NULL_HANDLER=1 (module form, for SWITCHYARD_PLUGINS)."""
    return NullHandler() if os.environ.get("BENCH_NULL_HANDLER") == "1" else None


@hookimpl
def switchyard_channel_types() -> list[str]:
    """Declares the `bench` channel type (module form, for SWITCHYARD_PLUGINS)."""
    return [CHANNEL_TYPE]


@hookimpl
def switchyard_channel_options() -> dict[str, type[ChannelOptions]]:
    """A bench profile takes no keys of its own (`switchyard run` checks profiles against this)."""
    return {CHANNEL_TYPE: ChannelOptions}


@hookimpl
def switchyard_channels(profile: ChannelProfile, context: ChannelContext) -> Any:
    """Builds a bench channel for `type: bench` profiles (module form, for SWITCHYARD_PLUGINS)."""
    return _MODULE_PLUGIN.switchyard_channels(profile, context)
