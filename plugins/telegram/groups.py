"""A Telegram sender's platform groups: whether they administer the group chat they write in (getChatAdministrators,
cached per chat), as the `senderGroups` ids docs/roles.md names: `admins` and `admins:<chat id>` for every
administrator (the owner included), `creator` and `creator:<chat id>` for the chat's owner."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.channelkit.groups import GroupLookup, names_groups

if TYPE_CHECKING:
    from telegram import Bot

    from gateway import ChannelContext

ADMINS = "admins"
CREATOR = "creator"
PRIVATE = "private"  # a chat with one person has no administrators (the Bot API answers 400): not asked


class ChatAdministrators:
    """Who administers each group chat of one bot, asked only for a profile whose `roles:` names a `group:`."""

    def __init__(self, bot: Bot, context: ChannelContext):
        self._bot = bot
        self._context = context
        self._lookup: GroupLookup[int, dict[int, str]] = GroupLookup(
            f"the administrators of telegram chat {{key}} (profile {context.profile.id})", self._fetch)

    async def of(self, chat_id: int, chat_type: str | None, user_id: int) -> list[str]:
        """The groups of `user_id` writing in `chat_id` (none in a private chat, when the profile names no group,
        or when Telegram did not answer in time)."""
        if chat_type == PRIVATE or not names_groups(self._context.profile):
            return []
        admins = await self._lookup.get(chat_id)
        status = (admins or {}).get(user_id)
        if status is None:
            return []
        found = [ADMINS, f"{ADMINS}:{chat_id}"]
        return [*found, CREATOR, f"{CREATOR}:{chat_id}"] if status == "creator" else found

    async def _fetch(self, chat_id: int) -> dict[int, str]:
        members = await self._bot.get_chat_administrators(chat_id)
        return {member.user.id: member.status for member in members}
