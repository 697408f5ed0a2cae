"""The Discord channel: a bot on the Discord gateway (discord.py), one bot token per profile.

Profile keys: `token_env` (required: the environment variable holding the bot token),
`api_base_url` (default https://discord.com/api/v10), `gateway_url` (default: discord.py's,
wss://gateway.discord.gg/), `require_mention` (default false: in guild channels, only take messages
that mention the bot, reply to it, or belong to a run's thread). discord.py keeps both URLs in
process-wide class attributes, so two Discord profiles in one process share them: configure them
on one profile only. discord.py is imported only when a Discord profile is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway import hookimpl

if TYPE_CHECKING:
    from pydantic import BaseModel

    from gateway import Channel, ChannelContext, ChannelProfile

CHANNEL_TYPE = "discord"
FILE_LIMIT = 10 * (1 << 20)
"""The attachments of one message, in bytes, on a server without boosts (Discord's default since 2024: "10 MB";
a boosted server takes 50 or 100 MB, but a bot cannot rely on a boost, so the default is the limit). A larger
file is refused by the chat tool before sending."""


@hookimpl
def switchyard_channel_options() -> dict[str, type[BaseModel]]:
    """Declares the keys a `type: discord` profile may carry."""
    from plugins.discord.profile import DiscordProfileOptions

    return {CHANNEL_TYPE: DiscordProfileOptions}


@hookimpl
def switchyard_channel_types() -> list[str]:
    return [CHANNEL_TYPE]


@hookimpl
def switchyard_channels(profile: ChannelProfile, context: ChannelContext) -> Channel | None:
    if profile.type != CHANNEL_TYPE:
        return None
    from plugins.discord.channel import DiscordChannel  # imports discord.py, or raises naming the extra

    return DiscordChannel(profile, context)


@hookimpl
def switchyard_file_limits() -> dict[str, int]:
    """The upload limit of a server without boosts (FILE_LIMIT)."""
    return {CHANNEL_TYPE: FILE_LIMIT}
