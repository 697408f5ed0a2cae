"""The keys a `type: discord` profile may carry (imported by the plugin's `switchyard_channel_options` hook, so
building a plugin manager does not import pydantic)."""

from __future__ import annotations

import warnings

from gateway.settings import ChannelOptions

LIBRARY_MISSING = "discord.py is not installed: pip install '.[discord]' in the Switchyard clone"


class DiscordProfileOptions(ChannelOptions):
    """The keys of a discord profile (see the module docstring)."""

    token_env: str | None = None
    api_base_url: str | None = None
    gateway_url: str | None = None
    require_mention: bool = False

    @classmethod
    def unavailable(cls) -> str | None:
        """discord.py not installed (it is the `discord` extra): the imports plugins/discord/channel.py makes."""
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "'audioop' is deprecated", DeprecationWarning)
                import discord.gateway
                import discord.http  # noqa: F401
        except ImportError:
            return LIBRARY_MISSING
        return None
