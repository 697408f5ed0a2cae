"""A `nullch` channel plugin for the fault tests: accepts every reply, sends nothing anywhere.

Loaded into `switchyard run` with SWITCHYARD_PLUGINS=tests.faults.nullchannel; it lets settings map
channel profiles to orchestrators without any real platform.
"""

from __future__ import annotations

from gateway import ChannelContext, ChannelProfile, DeliveryRecord, OutgoingPayload, Sink, hookimpl


class NullChannel:
    """Delivers by doing nothing (the dispatcher still moves each reply to sent/)."""

    name = "nullch"

    def __init__(self, profile_id: str):
        self.profile_id = profile_id

    async def start(self, sink: Sink) -> None:
        return None

    async def send(self, outgoing: OutgoingPayload) -> DeliveryRecord | None:
        return None

    async def stop(self) -> None:
        return None


@hookimpl
def switchyard_channel_types() -> list[str]:
    return ["nullch"]


@hookimpl
def switchyard_channels(profile: ChannelProfile, context: ChannelContext) -> NullChannel | None:
    return NullChannel(profile.id) if profile.type == "nullch" else None
