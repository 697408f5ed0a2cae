"""Writes outgoing payloads under their spec-002 names, refusing attachments the conversation may not receive."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from gateway.attachments import AttachmentPolicy, AttachmentRefused, note_refusals, open_attachment
from gateway.events import EventLog, now_ms
from gateway.home import Home, SpareFiles, atomic_write, safe_name
from gateway.models import OutgoingPayload

log = logging.getLogger("switchyard.outbox")


def outgoing_name(payload: OutgoingPayload, named_by_message_id: Collection[str] = ()) -> str:
    """`<messageId>.json` for a channel type in `named_by_message_id` (spec 002: the heartbeat's),
    `<channel>_<messageId>_<timestamp>.json` otherwise (made safe)."""
    if payload.channel in named_by_message_id:
        return f"{safe_name(payload.messageId)}.json"
    return f"{safe_name(payload.channel)}_{safe_name(payload.messageId)}_{payload.timestamp}.json"


class FileOutbox:
    """The gateway's one writer of `queue/outgoing/`: unique names, monotonic timestamps, safe files.

    `named_by_message_id` holds the channel types whose replies are `<messageId>.json` (those whose
    channel declares `Channel.reply_named_by_message_id`; the gateway adds each as it builds it): a
    second reply to the same message replaces the first there.
    """

    def __init__(self, home: Home, events: EventLog, *, extra_roots: Sequence[str | os.PathLike[str]] = (),
                 fsync: bool = True, named_by_message_id: Collection[str] = ()):
        self.home = home
        self.named_by_message_id = set(named_by_message_id)
        self.events = events
        self.attachments = AttachmentPolicy(home, extra_roots)
        self.fsync = fsync
        self._last_ms = 0
        self._lock = threading.Lock()
        self._spares = SpareFiles(home.outgoing)
        self.on_written: Callable[[str, OutgoingPayload], None] | None = None

    def write(self, payload: OutgoingPayload) -> Path:
        """Writes one payload atomically; a refused attachment is dropped and named in the text.

        `on_written(name, payload)` then hands the payload to the dispatcher without a re-read.
        """
        payload = self._checked_files(payload)
        with self._lock:
            stamp = max(payload.timestamp, now_ms(), self._last_ms + 1)
            while True:
                payload.timestamp = stamp
                path = self.home.outgoing / outgoing_name(payload, self.named_by_message_id)
                if payload.channel in self.named_by_message_id or not path.exists():
                    break
                stamp += 1
            self._last_ms = stamp
        atomic_write(path, payload.to_json(), fsync=self.fsync, spares=self._spares)
        if self.on_written is not None:
            self.on_written(path.name, payload)
        return path

    def close(self) -> None:
        """Removes the spare file kept ready in outgoing/."""
        self._spares.close()

    def _checked_files(self, payload: OutgoingPayload) -> OutgoingPayload:
        """Keeps the files this reply's conversation may receive (by their real paths); notes the others."""
        if not payload.files:
            return payload
        kept: list[str] = []
        refused: list[tuple[str, str]] = []
        for raw in payload.files:
            real = os.path.realpath(raw)
            try:
                if not os.path.isabs(raw):
                    raise AttachmentRefused(f"{raw}: not an absolute path")
                open_attachment(real, lambda path: self.attachments.allows(path, payload)).close()
            except AttachmentRefused as exc:
                refused.append((raw, str(exc)))
                continue
            kept.append(real)
        return note_refusals(payload.model_copy(update={"files": kept}), refused, self.events, stage="written")
