"""The prompt inbox channel (`type: inbox`): its profile keys and hooks; the channel itself
(plugins/inbox/channel.py) is imported when an inbox profile is built."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from gateway import ChannelOptions, hookimpl

if TYPE_CHECKING:
    from gateway import ChannelContext, ChannelProfile
    from plugins.inbox.channel import InboxChannel

CHANNEL_TYPE = "inbox"


class InboxProfileOptions(ChannelOptions):
    """The keys of an inbox profile (paths relative to the home)."""

    root: str = "inbox"
    processed_root: str = "processed"
    failed_root: str = "failed"
    fatal_policy: Literal["leave", "move"] = "move"
    poll_ms: float = Field(default=1000, gt=0)
    settle_ms: float = Field(default=200, ge=0)


@hookimpl
def switchyard_channel_options() -> dict[str, type[BaseModel]]:
    """Declares the keys a `type: inbox` profile may carry."""
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
