"""A Discord sender's platform groups: the roles of the server member who wrote (discord.py's Member.roles, which
the gateway's own events keep: no REST call), as the `senderGroups` ids docs/roles.md names: each role's id (unique
across Discord; the @everyone role's is the server's id) and `<server id>:<role name>` (a name alone could be
copied by anyone who makes a server and adds the bot to it)."""

from __future__ import annotations

import discord

from gateway import ChannelProfile
from gateway.channelkit.groups import names_groups


def member_groups(profile: ChannelProfile, who: discord.User | discord.Member) -> list[str]:
    """The groups of a message's or a tap's author: their roles in the server it came from (none in a DM, in a
    server whose GUILD_CREATE has not come yet — discord.py then knows no role of it, and its Member has no guild —
    or when the profile's `roles:` names no `group:`)."""
    if not isinstance(who, discord.Member) or who.guild is None or not names_groups(profile):
        return []
    return [found for role in who.roles for found in (str(role.id), f"{who.guild.id}:{role.name}")]
