"""How Telegram chats, forum topics and messages map to payload ids, and back.

Telegram message ids are only unique within a chat, so a payload's messageId is `<chat>:<id>`
(the gateway skips a repeated messageId as a duplicate). A conversation is the chat id, or
`<chat>/<topic>` for a message in a forum topic, so each topic is its own conversation.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    """Where a reply goes: a chat (numeric id or @username) and, in forums, a topic."""

    chat: int | str
    topic: int | None = None

    @classmethod
    def parse(cls, conversation: str) -> Target:
        """The target of a conversationId written by `conversation_id`."""
        chat, _, topic = conversation.partition("/")
        return cls(_as_int(chat), int(topic) if topic.isdigit() else None)


def conversation_id(chat: int, topic: int | None) -> str:
    """The conversationId of a chat, or of one forum topic of it."""
    return f"{chat}/{topic}" if topic else str(chat)


def message_ref(chat: int | str, message_id: int) -> str:
    """The id of one Telegram message across chats (messageId, RunThreads key, delivery id)."""
    return f"{chat}:{message_id}"


def replied_message(message_ref_text: str, chat: int | str) -> int | None:
    """The Telegram message id to reply to, when `message_ref_text` is a message of this chat."""
    ref_chat, _, number = message_ref_text.rpartition(":")
    if ref_chat == str(chat) and number.isdigit():
        return int(number)
    return None


def _as_int(value: str) -> int | str:
    try:
        return int(value)
    except ValueError:
        return value
