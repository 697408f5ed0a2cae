"""The Telegram channel plugin (python-telegram-bot): long polling or webhook, replies, files, typing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel

from gateway import ChannelContext, ChannelOptions, ChannelProfile, hookimpl
from plugins.telegram.options import CHANNEL_TYPE, TelegramOptions

if TYPE_CHECKING:  # the channel module is imported when a telegram profile is built, not by `status`
    from plugins.telegram.channel import TelegramChannel

__all__ = ["CHANNEL_TYPE", "TelegramOptions", "TelegramProfileOptions"]


class TelegramProfileOptions(ChannelOptions):
    """The keys of a telegram profile (TelegramOptions.from_profile reads them and checks what they need)."""

    token_env: str | None = None
    base_url: str | None = None
    base_file_url: str | None = None
    mode: Literal["polling", "webhook"] = "polling"
    poll_timeout_sec: float | None = None
    webhook_listen: str | None = None
    webhook_port: int | None = None
    webhook_path: str | None = None
    webhook_url: str | None = None
    webhook_secret_env: str | None = None
    reconnect_initial_sec: float | None = None
    reconnect_max_sec: float | None = None


@hookimpl
def switchyard_channel_options() -> dict[str, type[BaseModel]]:
    """Declares the keys a `type: telegram` profile may carry."""
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
