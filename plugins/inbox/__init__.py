"""The prompt inbox channel (`type: inbox`): its profile keys and hooks; the channel itself
(plugins/inbox/channel.py) is imported when an inbox profile is built."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway import hookimpl

if TYPE_CHECKING:
    from pydantic import BaseModel

    from gateway import ChannelContext, ChannelProfile
    from plugins.inbox.channel import InboxChannel

CHANNEL_TYPE = "inbox"


@hookimpl
def switchyard_channel_options() -> dict[str, type[BaseModel]]:
    """Declares the keys a `type: inbox` profile may carry."""
    from plugins.inbox.profile import InboxProfileOptions

    return {CHANNEL_TYPE: InboxProfileOptions}


@hookimpl
def switchyard_channel_types() -> list[str]:
    """Declares the `inbox` channel type."""
    return [CHANNEL_TYPE]


@hookimpl
def switchyard_channels(profile: ChannelProfile, context: ChannelContext) -> InboxChannel | None:
    """Builds the inbox channel for `type: inbox` profiles."""
    if profile.type != CHANNEL_TYPE:
        return None
    from plugins.inbox.channel import InboxChannel

    return InboxChannel(profile, context)
