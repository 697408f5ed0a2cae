"""The keys a `type: discord` profile may carry (imported by the plugin's `switchyard_channel_options` hook, so
building a plugin manager does not import pydantic)."""

from __future__ import annotations

from gateway.settings import ChannelOptions


class DiscordProfileOptions(ChannelOptions):
    """The keys of a discord profile (see the module docstring)."""

    token_env: str | None = None
    api_base_url: str | None = None
    gateway_url: str | None = None
    require_mention: bool = False
