"""Channel doubles for in-process gateways, built on gateway.testing.FakeChannel: `FakeChannelPlugin`
provides `fake` channels (and can fail their start), recording every event the gateway emits."""

from __future__ import annotations

from typing import Any

from gateway import ConfigurationError, hookimpl
from gateway.settings import ChannelProfile
from gateway.testing import FakeChannel


class FakeChannelPlugin:
    """Provides `fake` channels; a profile with `fail: true` fails at start with its token in the error."""

    def __init__(self) -> None:
        self.channels: dict[str, FakeChannel] = {}
        self.events: list[dict[str, Any]] = []
        self.outages: dict[str, int] = {}  # profile id → start attempts that fail as if the platform were down

    @hookimpl
    def switchyard_channels(self, profile: ChannelProfile, context: Any) -> FakeChannel | None:
        if profile.type != "fake":
            return None
        if profile.option("fail"):
            raise ConfigurationError("login refused for token s3cr3t-t0ken")
        if self.outages.get(profile.id):
            self.outages[profile.id] -= 1
            raise ConnectionRefusedError("platform unreachable")
        channel = FakeChannel("fake", profile.id)
        self.channels[profile.id] = channel
        return channel

    @hookimpl
    def switchyard_event(self, event: dict[str, Any]) -> None:
        self.events.append(event)
