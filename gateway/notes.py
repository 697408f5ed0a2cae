"""Progress notes on channels that edit messages: one platform message per note, updated in place."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable

from gateway.api import DeliveryRecord
from gateway.models import OutgoingPayload

NOTE_MEMORY = 1000
ELLIPSIS = "…"

PostNote = Callable[[str], Awaitable[str]]
"""Posts a note's text as a new message; returns its platform id."""

EditNote = Callable[[str, str], Awaitable[bool]]
"""Replaces the text of the message with this platform id; False when that message is gone."""


class NoteMessages:
    """Which platform message shows the progress note of each (conversation, progressKey).

    Kept in memory only and bounded (the least recently used entry is dropped first): notes are
    transient, so an entry lost on a restart or dropped from a full memory only means that the
    next note with that key is posted as a new message instead of editing the old one.
    """

    def __init__(self, limit: int = NOTE_MEMORY):
        self.limit = limit
        self._messages: OrderedDict[tuple[str, str], str] = OrderedDict()

    def get(self, conversation: str, key: str) -> str | None:
        """The platform id of the message showing this note, if one is remembered."""
        message_id = self._messages.get((conversation, key))
        if message_id is not None:
            self._messages.move_to_end((conversation, key))
        return message_id

    def remember(self, conversation: str, key: str, message_id: str) -> None:
        """Records the message that now shows this note, forgetting the oldest entry when full."""
        self._messages[(conversation, key)] = message_id
        self._messages.move_to_end((conversation, key))
        while len(self._messages) > self.limit:
            self._messages.popitem(last=False)


def clip_note(text: str, limit: int, measure: Callable[[str], int] = len) -> str:
    """The note cut to fit `limit` (as `measure` counts), ending in "…" when cut: a note is one message."""
    text = text.strip()
    if measure(text) <= limit:
        return text
    low, high = 0, min(len(text), limit)  # the longest prefix that fits with the ellipsis, by bisection
    while low < high:
        middle = (low + high + 1) // 2
        if measure(text[:middle] + ELLIPSIS) <= limit:
            low = middle
        else:
            high = middle - 1
    return text[:low].rstrip() + ELLIPSIS


async def deliver_note(outgoing: OutgoingPayload, notes: NoteMessages, text: str, post: PostNote,
                       edit: EditNote) -> DeliveryRecord:
    """Edits the message already showing this payload's note, else (first note, or that message is
    gone) posts a new one and remembers it; a blank note sends nothing.

    Failures of `post` and `edit` propagate as they are (DeliveryError is retried by the dispatcher).
    """
    key = outgoing.progress_key or ""
    conversation = outgoing.conversationId or outgoing.senderId or ""
    if not text:
        return DeliveryRecord(detail={"note": "blank"})
    message_id = notes.get(conversation, key)
    if message_id is not None and await edit(message_id, text):
        return DeliveryRecord(platform_ids=[message_id], detail={"note": "edited"})
    message_id = await post(text)
    notes.remember(conversation, key, message_id)
    return DeliveryRecord(platform_ids=[message_id], detail={"note": "posted"})
