"""Helpers for channel plugins: resumable multi-part delivery and the thread → run index."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gateway.channelkit.buttons import fits, numbered
from gateway.channelkit.chunking import split_message
from gateway.home import Home, atomic_write, remove_old_files, safe_name
from gateway.models import Button, OutgoingPayload
from gateway.seams import DeliveryRecord  # below gateway.api (which names the Backend): the outbox names the journal
from gateway.telemetry import tracing

log = logging.getLogger("switchyard.delivery")


@dataclass(frozen=True)
class Part:
    """One platform message of a reply: a text chunk or one file; the reply's last text chunk carries
    its buttons when the channel shows buttons (`reply_parts(..., shows_buttons=True)`)."""

    index: int
    text: str | None = None
    file: Path | None = None
    buttons: tuple[Button, ...] = ()


def reply_parts(outgoing: OutgoingPayload, limit: int, *, shows_buttons: bool = False) -> list[Part]:
    """The text split at `limit` (code fences kept whole), then each file.

    A reply's `buttons` ride on its last text chunk when the channel `shows_buttons` (and every id fits
    in 64 bytes); otherwise they are appended to the text as a numbered list to answer by number
    (gateway.channelkit.buttons.numbered).
    """
    offered = outgoing.buttons
    shows_buttons = shows_buttons and all(fits(button) for button in offered)
    text = outgoing.message if shows_buttons else numbered(outgoing.message, offered)
    texts = split_message(text, limit)
    if shows_buttons and offered and not texts:
        texts = [numbered("", offered).rpartition("\n")[0]]  # no text: the labels, so the message is not empty
    parts = [Part(index, text=text) for index, text in enumerate(texts)]
    if shows_buttons and offered:
        parts[-1] = Part(parts[-1].index, text=parts[-1].text, buttons=tuple(offered))
    parts += [Part(len(parts) + offset, file=Path(path)) for offset, path in enumerate(outgoing.files)]
    return parts


def delivery_key(outgoing: OutgoingPayload) -> str:
    """Identifies one outgoing payload across restarts (its spec-002 name)."""
    return f"{outgoing.channel}_{outgoing.messageId}_{outgoing.timestamp}"


JOURNAL_RETENTION_DAYS = 30.0


class DeliveryJournal:
    """Records each part's platform message id as it is sent, so a restart in the middle of a
    delivery continues after the last sent part instead of sending the whole reply again.

    A delivered reply's record is dropped at once. A dead-lettered one keeps its record (moved back
    to outgoing/, it continues after the parts already sent) for JOURNAL_RETENTION_DAYS; older
    records are removed when the channel starts.
    """

    def __init__(self, home: Home, profile_id: str):
        self.folder = home.state / "delivery" / safe_name(profile_id)
        self.folder.mkdir(parents=True, exist_ok=True)
        remove_old_files(self.folder, lambda name: name.endswith(".json"), JOURNAL_RETENTION_DAYS * 86400)

    def _path(self, key: str) -> Path:
        return self.folder / f"{safe_name(key)}.json"

    def sent_parts(self, key: str) -> dict[int, str]:
        """Part index → platform message id, for the parts already sent."""
        try:
            raw = json.loads(self._path(key).read_bytes())
        except (OSError, ValueError):
            return {}
        return {int(index): str(pid) for index, pid in raw.items()}

    def record(self, key: str, index: int, platform_id: str) -> None:
        sent = self.sent_parts(key)
        sent[index] = platform_id
        atomic_write(self._path(key), json.dumps(sent).encode(), fsync=True)

    def forget(self, key: str) -> None:
        """Drops the record once the whole payload is delivered."""
        self._path(key).unlink(missing_ok=True)


SendPart = Callable[[Part], Awaitable[str]]


class SharedJournal(Protocol):
    """A delivery journal kept outside this host (the postgres backend's outbox row), for the one
    payload being delivered; the delivery that set it forgets it when it marks the payload sent."""

    async def sent_parts(self) -> dict[int, str]:
        """Part index → platform message id, for the parts already sent (by any process)."""

    async def record(self, index: int, platform_id: str) -> None:
        """Records one sent part; raises when it cannot, so no later part is sent unrecorded."""


SHARED_JOURNAL: ContextVar[SharedJournal | None] = ContextVar("switchyard_shared_journal", default=None)
"""Set by a dispatcher around `Channel.send` when the journal must outlive this host: `deliver_parts`
then uses it instead of the channel's own DeliveryJournal, so channels need not know the backend."""


async def deliver_parts(
    outgoing: OutgoingPayload, parts: list[Part], send_part: SendPart, journal: DeliveryJournal
) -> DeliveryRecord:
    """Sends the parts not yet sent, in order, journaling each platform id; returns all ids.

    An exception from `send_part` (e.g. a DeliveryError after a 429) leaves the journal with the
    parts sent so far; the dispatcher retries the payload and only the rest is sent. The journal
    is the SHARED_JOURNAL when one is set (see there), else `journal`.
    """
    shared = SHARED_JOURNAL.get()
    key = delivery_key(outgoing)
    sent = await shared.sent_parts() if shared is not None else journal.sent_parts(key)
    for part in parts:
        if part.index in sent:
            continue
        with tracing.span("delivery.part", **{"switchyard.part": part.index}):
            platform_id = await send_part(part)
        if shared is not None:
            await shared.record(part.index, platform_id)
        else:
            journal.record(key, part.index, platform_id)
        sent[part.index] = platform_id
    if shared is None:
        journal.forget(key)
    return DeliveryRecord(platform_ids=[sent[p.index] for p in parts], detail={"parts": len(parts)})


class RunThreads:
    """Remembers which platform message or thread belongs to which workflow run, per profile, so a
    reply in that thread (or to that message) carries the run's workflowRunId."""

    def __init__(self, home: Home, profile_id: str, *, limit: int = 5000):
        self.path = home.state / "threads" / f"{safe_name(profile_id)}.json"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.limit = limit
        try:
            self._map: dict[str, str] = json.loads(self.path.read_bytes())
        except (OSError, ValueError):
            self._map = {}

    def remember(self, platform_ref: str, run_id: str) -> None:
        """Associates a platform message id or thread id with a run."""
        if self._map.get(platform_ref) == run_id:
            return
        self._map[platform_ref] = run_id
        while len(self._map) > self.limit:
            self._map.pop(next(iter(self._map)))
        atomic_write(self.path, json.dumps(self._map).encode(), fsync=False)

    def run_for(self, *platform_refs: Any) -> str | None:
        """The run of the first reference that belongs to one (None when none does)."""
        for ref in platform_refs:
            if ref is not None and str(ref) in self._map:
                return self._map[str(ref)]
        return None
