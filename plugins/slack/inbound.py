"""Reading Slack message events: who wrote them, which conversation and thread, and the clean text."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

# Subtypes that are a person's new message; deletions, joins and the like are not (an edit is read apart).
PERSON_SUBTYPES = {None, "file_share", "thread_broadcast", "me_message"}
EDITED = "message_changed"  # the event of an edit: the message as it is now under `message`
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
    edited_ts: str | None = None  # set for an edit: when it was edited (`message.edited.ts`)

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
    """The message of a person in `event` (for an edit, `message_changed`, the message as edited, with
    `edited_ts`, from the person who edited it, `message.edited.user`, not the `message.user` it names as the
    author), or None for bots (this one included), deletions, link unfurls and the like."""
    if event.get("type") != "message":
        return None
    if event.get("subtype") == EDITED:
        inner = event.get("message")
        if not isinstance(inner, dict):
            return None
        edited = inner.get("edited")
        if not isinstance(edited, dict) or not edited.get("ts"):  # an unfurl or a bot's update: no edit
            return None
        found = person_message({**inner, "type": "message", "channel": event.get("channel")}, bot)
        editor = str(edited.get("user") or "") or (found.user if found is not None else "")
        if found is None or editor == bot.user_id:
            return None
        return SlackMessage(**{**found.__dict__, "user": editor, "edited_ts": str(edited["ts"])})
    if event.get("subtype") not in PERSON_SUBTYPES:
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


@dataclass(frozen=True)
class SlackTap:
    """A person's tap on a button of a bot message (one action of a block_actions payload)."""

    channel: str
    message_ts: str
    thread_ts: str | None
    user: str
    button: str
    label: str
    trigger_id: str
    blocks: list[dict[str, Any]] = field(default_factory=list)
    text: str = ""

    @property
    def conversation(self) -> str:
        """The conversation of the tapped message: `<channel>`, or `<channel>:<thread_ts>` in a thread."""
        in_thread = bool(self.thread_ts) and self.thread_ts != self.message_ts
        return f"{self.channel}:{self.thread_ts}" if in_thread else self.channel


def tap_of(body: dict[str, Any], bot: BotIdentity) -> SlackTap | None:
    """The tap on a button in a block_actions payload, or None (another kind of action, a bot, no message)."""
    actions = [a for a in body.get("actions") or [] if isinstance(a, dict) and a.get("type") == "button"]
    user = str((body.get("user") or {}).get("id") or "")
    container = body.get("container") or {}
    message = body.get("message") or {}
    channel = str(container.get("channel_id") or (body.get("channel") or {}).get("id") or "")
    if body.get("type") != "block_actions" or not actions or not user or user == bot.user_id or not channel:
        return None
    action = actions[0]
    button = str(action.get("value") or action.get("action_id") or "")
    label = str((action.get("text") or {}).get("text") or button)
    thread_ts = message.get("thread_ts") or container.get("thread_ts")
    return SlackTap(channel=channel, message_ts=str(container.get("message_ts") or message.get("ts") or ""),
                    thread_ts=str(thread_ts) if thread_ts else None, user=user, button=button, label=label,
                    trigger_id=str(body.get("trigger_id") or action.get("action_ts") or ""),
                    blocks=list(message.get("blocks") or []), text=str(message.get("text") or ""))
