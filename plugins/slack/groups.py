"""A Slack sender's platform groups: the workspace's user groups they are in (one `usergroups.list` call with
`include_users`, cached for the workspace; it needs the `usergroups:read` scope), as the `senderGroups` ids
docs/roles.md names: each group's id (`S…`) and its handle (`ops` for @ops)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.channelkit.groups import GroupLookup, names_groups

if TYPE_CHECKING:
    from slack_sdk.web.async_client import AsyncWebClient

    from gateway import ChannelContext

WORKSPACE = "workspace"  # the one key of the cache: a bot token belongs to one workspace


class UserGroups:
    """Which user groups each member of the workspace is in, asked only for a profile whose `roles:` names a
    `group:`."""

    def __init__(self, web: AsyncWebClient, context: ChannelContext):
        self._web = web
        self._context = context
        self._lookup: GroupLookup[str, dict[str, list[str]]] = GroupLookup(
            f"the slack user groups (profile {context.profile.id})", self._fetch)

    async def of(self, user: str) -> list[str]:
        """The groups of `user` (none when the profile names no group, or Slack did not answer in time)."""
        if not names_groups(self._context.profile):
            return []
        members = await self._lookup.get(WORKSPACE)
        return (members or {}).get(user, [])

    async def _fetch(self, _: str) -> dict[str, list[str]]:
        response = await self._web.usergroups_list(include_users=True)
        members: dict[str, list[str]] = {}
        listed: list[dict[str, Any]] = response.get("usergroups") or []
        for group in listed:
            if group.get("date_delete"):
                continue  # a disabled group (listed only with include_disabled) names no one
            ids = [str(group["id"])] + ([str(group["handle"])] if group.get("handle") else [])
            for user in group.get("users") or []:
                members.setdefault(str(user), []).extend(ids)
        return members
