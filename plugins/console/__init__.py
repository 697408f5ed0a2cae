"""The console channel: chat with Switchyard on stdin/stdout (the reference channel implementation).

The hooks live here; the channel (plugins/console/channel.py) is imported when a console profile is
built, so that loading the plugins (as `switchyard status` does) stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway import hookimpl

if TYPE_CHECKING:
    from pydantic import BaseModel

    from gateway import ChannelContext, ChannelProfile
    from plugins.console.channel import ConsoleChannel

CHANNEL_TYPE = "console"


@hookimpl
def switchyard_channel_options() -> dict[str, type[BaseModel]]:
    """Declares the keys a `type: console` profile may carry."""
    from plugins.console.profile import ConsoleProfileOptions

    return {CHANNEL_TYPE: ConsoleProfileOptions}


@hookimpl
def switchyard_channel_types() -> list[str]:
    return [CHANNEL_TYPE]


@hookimpl
def switchyard_channels(profile: ChannelProfile, context: ChannelContext) -> ConsoleChannel | None:
    if profile.type != CHANNEL_TYPE:
        return None
    from plugins.console.channel import ConsoleChannel

    return ConsoleChannel(profile, context=context)
