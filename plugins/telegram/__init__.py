"""The Telegram channel plugin (python-telegram-bot): long polling or webhook, replies, files, typing."""

from __future__ import annotations

from gateway import ChannelContext, ChannelProfile, hookimpl
from plugins.telegram.channel import TelegramChannel
from plugins.telegram.options import CHANNEL_TYPE, TelegramOptions

__all__ = ["CHANNEL_TYPE", "TelegramChannel", "TelegramOptions"]


@hookimpl
def switchyard_channel_types() -> list[str]:
    return [CHANNEL_TYPE]


@hookimpl
def switchyard_channels(profile: ChannelProfile, context: ChannelContext) -> TelegramChannel | None:
    if profile.type != CHANNEL_TYPE:
        return None
    return TelegramChannel(TelegramOptions.from_profile(profile), context)
