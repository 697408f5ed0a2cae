"""A conversation's scope: what its agent sessions, live turns, approvals, history and reminders belong to
(docs/architecture.md, "scope"), spelt `conv:<channel>/<profile>/<conversation>` wherever it is stored,
compared or shown. Kept free of pydantic, so any module (a command's, a backend's) may use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

PREFIX = "conv:"


class Addressed(Protocol):
    """What a scope is read from: a message's channel, channel profile and conversation (IncomingPayload)."""

    @property
    def channel(self) -> str: ...
    @property
    def profile(self) -> str: ...
    @property
    def conversation(self) -> str: ...


@dataclass(frozen=True)
class ConversationScope:
    """One conversation of one channel profile, as the scope of what belongs to it."""

    channel: str
    profile: str
    conversation: str

    @classmethod
    def of(cls, message: Addressed) -> ConversationScope:
        """The scope of the conversation `message` comes from."""
        return cls(message.channel, message.profile, message.conversation)

    @classmethod
    def parse(cls, text: str) -> ConversationScope | None:
        """The conversation scope `text` spells (its conversation may hold `/`); None for any other scope (a
        run's `run:<runId>`). A numbered session's scope (`…#session-N`) parses with the mark in its conversation."""
        if not text.startswith(PREFIX):
            return None
        parts = text.removeprefix(PREFIX).split("/", 2)
        return cls(parts[0], parts[1], parts[2]) if len(parts) == 3 else None

    @property
    def path(self) -> str:
        """`<channel>/<profile>/<conversation>`: how listings name the conversation, and the runs' key of it."""
        return f"{self.channel}/{self.profile}/{self.conversation}"

    @property
    def key(self) -> str:
        """The scope as it is stored and compared: `conv:<channel>/<profile>/<conversation>`."""
        return f"{PREFIX}{self.path}"

    def __str__(self) -> str:
        return self.key
