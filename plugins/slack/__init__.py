"""The Slack channel plugin (`type: slack`): Socket Mode or the HTTP Events API, through slack-bolt."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel

from gateway import ChannelContext, ChannelOptions, ChannelProfile, hookimpl
from plugins.slack.config import CHANNEL_TYPE, SlackConfig

if TYPE_CHECKING:  # the channel module is imported when a slack profile is built, not by `status`
    from plugins.slack.channel import SlackChannel

__all__ = ["CHANNEL_TYPE", "SlackConfig", "SlackProfileOptions"]


class SlackProfileOptions(ChannelOptions):
    """The keys of a slack profile (SlackConfig.from_profile reads them, with its defaults)."""

    mode: Literal["socket", "http"] = "socket"
    bot_token_env: str | None = None
    app_token_env: str | None = None
    signing_secret_env: str | None = None
    api_base_url: str | None = None
    http_path: str | None = None
    http_listen: str | None = None
    http_port: int | None = None
    text_limit: int | None = None
    typing_reaction: str | None = None


@hookimpl
def switchyard_channel_options() -> dict[str, type[BaseModel]]:
    """Declares the keys a `type: slack` profile may carry."""
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
