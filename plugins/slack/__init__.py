"""The Slack channel plugin (`type: slack`): Socket Mode or the HTTP Events API, through slack-bolt."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway import hookimpl
from plugins.slack.config import CHANNEL_TYPE, SlackConfig

if TYPE_CHECKING:  # the channel module is imported when a slack profile is built, not by `status`
    from pydantic import BaseModel

    from gateway import ChannelContext, ChannelProfile
    from plugins.slack.channel import SlackChannel

__all__ = ["CHANNEL_TYPE", "SlackConfig"]


@hookimpl
def switchyard_channel_options() -> dict[str, type[BaseModel]]:
    """Declares the keys a `type: slack` profile may carry."""
    from plugins.slack.profile import SlackProfileOptions

    return {CHANNEL_TYPE: SlackProfileOptions}


@hookimpl
def switchyard_channel_types() -> list[str]:
    return [CHANNEL_TYPE]


@hookimpl
def switchyard_channels(profile: ChannelProfile, context: ChannelContext) -> SlackChannel | None:
    if profile.type != CHANNEL_TYPE:
        return None
    from plugins.slack.channel import SlackChannel

    return SlackChannel(SlackConfig.from_profile(profile), context)


@hookimpl
def switchyard_file_limits() -> dict[str, int]:
    """Slack's upload limit (plugins.slack.config.FILE_LIMIT)."""
    from plugins.slack.config import FILE_LIMIT

    return {CHANNEL_TYPE: FILE_LIMIT}
