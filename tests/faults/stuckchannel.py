"""A `stuckch` channel plugin for the shutdown tests: its first start fails, every later start hangs
in a "login" that swallows cancellation, as discord.py's `wait_for(client.login(...))` did.

Option `swallow`: `once` turns the first cancellation into a ConnectionError (the retry loop then
goes on unless it checks a stop flag); `always` never lets the start end. Loaded with
SWITCHYARD_PLUGINS=tests.faults.stuckchannel.
"""

from __future__ import annotations

import asyncio

from gateway import ChannelContext, ChannelProfile, DeliveryRecord, OutgoingPayload, Sink, hookimpl

_starts: dict[str, int] = {}


class StuckChannel:
    """A channel whose platform never lets it log in."""

    name = "stuckch"

    def __init__(self, profile: ChannelProfile, context: ChannelContext):
        self.profile_id = profile.id
        self.context = context
        self.swallow = str(profile.option("swallow", "once"))

    async def start(self, sink: Sink) -> None:
        _starts[self.profile_id] = _starts.get(self.profile_id, 0) + 1
        if _starts[self.profile_id] == 1:
            raise ConnectionError("platform unreachable")
        self.context.events.emit("stuckch.login", profile=self.profile_id)
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if self.swallow == "once":
                    raise ConnectionError("login interrupted") from None

    async def send(self, outgoing: OutgoingPayload) -> DeliveryRecord | None:
        return None

    async def stop(self) -> None:
        return None


@hookimpl
def switchyard_channel_types() -> list[str]:
    return ["stuckch"]


@hookimpl
def switchyard_channels(profile: ChannelProfile, context: ChannelContext) -> StuckChannel | None:
    return StuckChannel(profile, context) if profile.type == "stuckch" else None
