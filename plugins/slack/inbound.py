"""Reading Slack message events: who wrote them, which conversation and thread, and the clean text."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

# Subtypes that are a person's new message; edits, deletions, joins and the like are not.
PERSON_SUBTYPES = {None, "file_share", "thread_broadcast", "me_message"}
_MENTION = re.compile(r"^\s*<@(?P<user>[A-Z0-9]+)(\|[^>]*)?>[:,]?\s*")


@dataclass(frozen=True)
class BotIdentity:
    """Who the bot is on Slack (from auth.test), so its own messages can be ignored."""

    user_id: str
    bot_id: str | None = None


@dataclass(frozen=True)
class SlackMessage:
    """The parts of a message event the channel uses."""

    channel: str
    ts: str
    user: str
    text: str
    thread_ts: str | None = None
    files: list[dict[str, Any]] = field(default_factory=list)

    @property
    def in_thread(self) -> bool:
        """True for a reply inside a thread (not the thread's root message)."""
        return bool(self.thread_ts) and self.thread_ts != self.ts

    @property
    def conversation(self) -> str:
        """`<channel>` for a top-level message, `<channel>:<thread_ts>` inside a thread."""
        return f"{self.channel}:{self.thread_ts}" if self.in_thread else self.channel

    @property
    def timestamp_ms(self) -> int:
        """The message time in milliseconds (Slack's ts is seconds with microseconds)."""
        return int(float(self.ts) * 1000)


def person_message(event: dict[str, Any], bot: BotIdentity) -> SlackMessage | None:
    """The message of a person in `event`, or None for bots (this one included), edits and the like."""
    if event.get("type") != "message" or event.get("subtype") not in PERSON_SUBTYPES:
        return None
    if event.get("bot_id") or event.get("bot_profile"):
        return None
    user, channel, ts = event.get("user"), event.get("channel"), event.get("ts")
    if not user or not channel or not ts or user == bot.user_id:
        return None
    return SlackMessage(channel=str(channel), ts=str(ts), user=str(user),
                        text=clean_text(str(event.get("text") or ""), bot.user_id),
                        thread_ts=str(event["thread_ts"]) if event.get("thread_ts") else None,
                        files=[f for f in event.get("files") or [] if isinstance(f, dict)])


def clean_text(text: str, bot_user_id: str) -> str:
    """Drops a leading mention of the bot and undoes Slack's escaping of `&`, `<` and `>`."""
    match = _MENTION.match(text)
    if match and match.group("user") == bot_user_id:
        text = text[match.end():]
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def split_conversation(conversation: str) -> tuple[str, str | None]:
    """(channel id, thread ts or None) from a conversationId made by SlackMessage.conversation."""
    channel, _, thread_ts = conversation.partition(":")
    return channel, thread_ts or None


def run_ref(channel: str, ts: str) -> str:
    """The RunThreads key of one Slack message (a thread is keyed by its root message)."""
    return f"{channel}:{ts}"
