"""Channel plugins for the postgres receipt tests: `chat` takes "queued" receipts, `probe` does not.

Loaded into `switchyard run` with SWITCHYARD_PLUGINS=tests.backends.postgres.chatchannel; both accept every reply
and send it nowhere (what was written is read from switchyard_outbox).
"""

from __future__ import annotations

from gateway import ChannelContext, ChannelProfile, hookimpl
from tests.faults.nullchannel import NullChannel


class ChatChannel(NullChannel):
    """A chat: its waiting senders are told they are queued."""

    name = "chat"


class ProbeChannel(ChatChannel):
    """Not a chat: no receipts."""

    name = "probe"
    takes_receipts = False


@hookimpl
def switchyard_channel_types() -> list[str]:
    return ["chat", "probe"]


@hookimpl
def switchyard_channels(profile: ChannelProfile, context: ChannelContext) -> ChatChannel | None:
    kinds = {"chat": ChatChannel, "probe": ProbeChannel}
    return kinds[profile.type](profile.id) if profile.type in kinds else None
