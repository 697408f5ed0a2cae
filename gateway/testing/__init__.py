"""Reusable test helpers for Switchyard and its plugins: polling waits, a fake channel, payload makers."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from gateway.api import DeliveryError, DeliveryRecord, Sink
from gateway.home import Home
from gateway.models import IncomingPayload, OutgoingPayload
from gateway.telemetry.events import now_ms


def make_incoming(text: str = "hello", **fields: Any) -> IncomingPayload:
    """An incoming payload with every required field filled; keyword arguments override."""
    stamp = now_ms()
    values: dict[str, Any] = {"channel": "console", "channelProfileId": "console", "sender": "Ada",
                              "senderId": "u1", "message": text, "timestamp": stamp,
                              "messageId": f"m-{time.time_ns()}", "conversationId": "c1"}
    values.update(fields)
    return IncomingPayload(**values)


def drop_incoming(home: Home, payload: IncomingPayload | dict[str, Any] | bytes, name: str) -> Path:
    """Writes a payload file into incoming/ the way other programs must: `.tmp`, then rename."""
    if isinstance(payload, IncomingPayload):
        data = payload.to_json()
    elif isinstance(payload, dict):
        data = json.dumps(payload).encode()
    else:
        data = payload
    tmp = home.incoming / f"{name}.tmp"
    tmp.write_bytes(data)
    final = home.incoming / name
    tmp.rename(final)
    return final


def wait_until(condition: Callable[[], Any], timeout_s: float = 10.0, interval_s: float = 0.02) -> Any:
    """Polls `condition` until it returns something truthy (returned) or fails after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s}s")
        time.sleep(interval_s)


async def async_wait_until(condition: Callable[[], Any], timeout_s: float = 10.0, interval_s: float = 0.01) -> Any:
    """`wait_until` for async tests: yields to the event loop between polls."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s}s")
        await asyncio.sleep(interval_s)


def read_json_files(folder: Path) -> list[dict[str, Any]]:
    """Every `*.json` payload in a folder (error reports excluded), oldest first."""
    paths = sorted((p for p in folder.glob("*.json") if not p.name.endswith(".error.json")),
                   key=lambda p: (p.stat().st_mtime_ns, p.name))
    return [json.loads(p.read_bytes()) for p in paths]


class FakeChannel:
    """A channel that records what it is asked to send and can inject inbound messages.

    `fail_times` makes the first N sends raise DeliveryError (to test retries).
    """

    def __init__(self, name: str = "fake", profile_id: str = "fake", *, fail_times: int = 0,
                 retry_after: float | None = None):
        self.name = name
        self.profile_id = profile_id
        self.sent: list[OutgoingPayload] = []
        self.typing_calls: list[str] = []
        self.fail_times = fail_times
        self.retry_after = retry_after
        self.sink: Sink | None = None
        self.stopped = False
        self.on_send: Callable[[OutgoingPayload], Awaitable[None]] | None = None

    async def start(self, sink: Sink) -> None:
        self.sink = sink

    async def inject(self, text: str, **fields: Any) -> Path:
        """Feeds one inbound message through the gateway's sink, as a platform event would."""
        assert self.sink is not None, "channel not started"
        fields.setdefault("channel", self.name)
        fields.setdefault("channelProfileId", self.profile_id)
        return await self.sink(make_incoming(text, **fields))

    async def send(self, outgoing: OutgoingPayload) -> DeliveryRecord:
        if self.on_send is not None:
            await self.on_send(outgoing)
        if self.fail_times > 0:
            self.fail_times -= 1
            raise DeliveryError("fake platform unavailable", retry_after=self.retry_after)
        self.sent.append(outgoing)
        return DeliveryRecord(platform_ids=[f"p{len(self.sent)}"])

    async def typing(self, conversation: str) -> None:
        self.typing_calls.append(conversation)

    async def stop(self) -> None:
        self.stopped = True
