"""The keys a `type: console` profile may carry (imported by the plugin's `switchyard_channel_options` hook, so
building a plugin manager does not import pydantic)."""

from __future__ import annotations

from gateway.config.fields import IdText
from gateway.settings import ChannelOptions


class ConsoleProfileOptions(ChannelOptions):
    """The keys of a console profile."""

    sender: str | None = None
    conversation_id: IdText = "console"
