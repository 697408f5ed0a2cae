"""A `nullch` channel plugin for the fault tests: accepts every reply, sends nothing anywhere.

Loaded into `switchyard run` with SWITCHYARD_PLUGINS=tests.faults.nullchannel; it lets settings map
channel profiles to orchestrators without any real platform.
"""

from __future__ import annotations

from gateway import ChannelContext, ChannelProfile, hookimpl
from gateway.testing import FakeChannel


class NullChannel(FakeChannel):
    """gateway.testing's FakeChannel under this plugin's name: it records each reply and sends it nowhere
    (the dispatcher still moves each reply to sent/)."""

    name = "nullch"

    def __init__(self, profile_id: str):
        super().__init__(type(self).name, profile_id)


@hookimpl
def switchyard_channel_types() -> list[str]:
    return ["nullch"]


@hookimpl
def switchyard_channels(profile: ChannelProfile, context: ChannelContext) -> NullChannel | None:
    return NullChannel(profile.id) if profile.type == "nullch" else None
