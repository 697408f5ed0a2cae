"""The Telegram channel plugin (python-telegram-bot): long polling or webhook, replies, files, typing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway import hookimpl
from plugins.telegram.options import CHANNEL_TYPE, TelegramOptions

if TYPE_CHECKING:  # the channel module is imported when a telegram profile is built, not by `status`
    from pydantic import BaseModel

    from gateway import ChannelContext, ChannelProfile
    from plugins.telegram.channel import TelegramChannel

__all__ = ["CHANNEL_TYPE", "TelegramOptions"]


@hookimpl
def switchyard_channel_options() -> dict[str, type[BaseModel]]:
    """Declares the keys a `type: telegram` profile may carry."""
    from plugins.telegram.profile import TelegramProfileOptions

    return {CHANNEL_TYPE: TelegramProfileOptions}


@hookimpl
def switchyard_channel_types() -> list[str]:
    return [CHANNEL_TYPE]


@hookimpl
def switchyard_channels(profile: ChannelProfile, context: ChannelContext) -> TelegramChannel | None:
    if profile.type != CHANNEL_TYPE:
        return None
    from plugins.telegram.channel import TelegramChannel

    return TelegramChannel(TelegramOptions.from_profile(profile), context)


@hookimpl
def switchyard_file_limits() -> dict[str, int]:
    """The Bot API's 50 MB upload limit (plugins.telegram.limits.FILE_LIMIT)."""
    from plugins.telegram.limits import FILE_LIMIT

    return {CHANNEL_TYPE: FILE_LIMIT}
