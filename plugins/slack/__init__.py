"""The Slack channel plugin (`type: slack`): Socket Mode or the HTTP Events API, through slack-bolt."""

from __future__ import annotations

from gateway import ChannelContext, ChannelProfile, hookimpl
from plugins.slack.channel import CHANNEL_TYPE, SlackChannel
from plugins.slack.config import SlackConfig

__all__ = ["CHANNEL_TYPE", "SlackChannel", "SlackConfig"]


@hookimpl
def switchyard_channel_types() -> list[str]:
    return [CHANNEL_TYPE]


@hookimpl
def switchyard_channels(profile: ChannelProfile, context: ChannelContext) -> SlackChannel | None:
    if profile.type != CHANNEL_TYPE:
        return None
    return SlackChannel(SlackConfig.from_profile(profile), context)
