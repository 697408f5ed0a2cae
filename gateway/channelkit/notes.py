"""Progress notes on channels that edit messages: one platform message per note, updated in place; a
streamed answer's preview is such a note, edited into the final answer's first part."""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from pathlib import Path

from gateway.api import DeliveryRecord
from gateway.channelkit.delivery import Part, SendPart
from gateway.home import Home, atomic_write, safe_name
from gateway.models import OutgoingPayload

log = logging.getLogger("switchyard.notes")

NOTE_MEMORY = 1000
ELLIPSIS = "…"

PostNote = Callable[[str], Awaitable[str]]
"""Posts a note's text as a new message; returns its platform id."""

EditNote = Callable[[str, str], Awaitable[bool]]
"""Replaces the text of the message with this platform id; False when that message is gone."""


class NoteMessages:
    """Which platform message shows the progress note of each (conversation, progressKey).

    Bounded (the least recently used entry is dropped first): an entry dropped from a full memory only
    means that the next note with that key is posted as a new message instead of editing the old one.
    With a `path` the entries are also kept in that file (rewritten when a message is first remembered or
    forgotten, not on edits), so after a restart a final answer still replaces its preview; without one
    they live in memory only.
    """

    def __init__(self, limit: int = NOTE_MEMORY, path: Path | None = None):
        self.limit = limit
        self.path = path
        self._messages: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._streams: set[tuple[str, str]] = set()  # entries showing a streamed answer's preview
        if path is not None:
            self._load(path)

    @classmethod
    def kept_for(cls, home: Home, profile_id: str) -> NoteMessages:
        """The note messages of a channel profile, kept in the home (`state/notes/<profile>.json`)."""
        return cls(path=home.state / "notes" / f"{safe_name(profile_id)}.json")

    def _load(self, path: Path) -> None:
        try:
            entries = json.loads(path.read_bytes())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.warning("cannot read the note messages in %s (notes are posted anew): %s", path, exc)
            return
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, list) and len(entry) in (3, 4) and all(isinstance(item, str) for item in entry):
                self._messages[(entry[0], entry[1])] = entry[2]
                if entry[3:] == ["stream"]:
                    self._streams.add((entry[0], entry[1]))

    def _save(self) -> None:
        if self.path is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            data = [[conversation, key, message, *(["stream"] if (conversation, key) in self._streams else [])]
                    for (conversation, key), message in self._messages.items()]
            atomic_write(self.path, json.dumps(data).encode(), fsync=False)
        except OSError as exc:  # a note is a courtesy: at worst the next one is posted anew
            log.warning("cannot keep the note messages in %s: %s", self.path, exc)

    def get(self, conversation: str, key: str) -> str | None:
        """The platform id of the message showing this note, if one is remembered."""
        message_id = self._messages.get((conversation, key))
        if message_id is not None:
            self._messages.move_to_end((conversation, key))
        return message_id

    def remember(self, conversation: str, key: str, message_id: str, *, stream: bool = False) -> None:
        """Records the message that now shows this note (`stream`: a streamed answer's preview), forgetting
        the oldest entry when full."""
        self._messages[(conversation, key)] = message_id
        self._messages.move_to_end((conversation, key))
        (self._streams.add if stream else self._streams.discard)((conversation, key))
        while len(self._messages) > self.limit:
            self._streams.discard(self._messages.popitem(last=False)[0])
        self._save()

    def forget(self, conversation: str, key: str) -> None:
        """Drops the entry: that message no longer shows the note (it became a final answer)."""
        self._streams.discard((conversation, key))
        if self._messages.pop((conversation, key), None) is not None:
            self._save()

    def close_streams(self, conversation: str) -> None:
        """Forgets the previews of the conversation's streamed answers: what the answer writes next, and
        the answer itself, come as new messages below whatever was posted meanwhile."""
        for entry in [entry for entry in self._streams if entry[0] == conversation]:
            self.forget(*entry)


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
    notes.remember(conversation, key, message_id, stream=outgoing.draft)
    return DeliveryRecord(platform_ids=[message_id], detail={"note": "posted"})


def asks_the_user(outgoing: OutgoingPayload) -> bool:
    """Whether a reply asks the user something (it has buttons, or its run waits for an answer): an answer
    streamed before it must not be completed above it, out of sight."""
    return bool(outgoing.buttons) or (outgoing.model_extra or {}).get("runState") == "waiting_input"


def replacing_preview(outgoing: OutgoingPayload, notes: NoteMessages, send_part: SendPart, edit: EditNote) -> SendPart:
    """`send_part` for every ordinary reply. A reply that asks the user something closes the conversation's
    previews (`NoteMessages.close_streams`). Of a final answer (`streamKey`), the first part, when it is
    text, replaces the text of the message showing that stream's preview instead of being posted; every
    other part, and the first when no preview is remembered, that message is gone or the part carries
    buttons (an edit does not add them), goes through `send_part` as usual. Hand the result to
    `deliver_parts`: it journals the edited message like a posted one, so a retry never sends it again."""
    key = outgoing.stream_key
    conversation = outgoing.conversationId or outgoing.senderId or ""
    if key is None and asks_the_user(outgoing):
        notes.close_streams(conversation)
    preview = notes.get(conversation, key) if key else None
    if key is None or preview is None:
        return send_part

    async def send(part: Part) -> str:
        if part.index == 0 and part.text is not None and not part.buttons:  # an edit would drop buttons
            edited = await edit(preview, part.text)
            notes.forget(conversation, key)
            if edited:
                return preview
        return await send_part(part)

    return send
