"""The outbox: where a handled message's replies are stored until they are delivered. Writes outgoing payloads
under their spec-002 names, refusing attachments the conversation may not receive; FileOutbox keeps them in
queue/outgoing/, the postgres backend's PgOutbox as rows (gateway/backends/postgres/outbox.py). And how the
delivery loop (gateway/runtime/sending.py) finds the stored replies of one conversation: a `Conversation`
handing out its `Head`."""

from __future__ import annotations

import glob
import json
import logging
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from gateway.channelkit.attachments import AttachmentPolicy, AttachmentRefused, note_refusals, open_attachment
from gateway.home import Home, SpareFiles, atomic_write, safe_name
from gateway.models import OutgoingPayload
from gateway.telemetry.events import EventLog, now_ms

if TYPE_CHECKING:
    from gateway.channelkit.delivery import SharedJournal
    from gateway.seams import Channel

log = logging.getLogger("switchyard.outbox")


def outgoing_name(payload: OutgoingPayload, named_by_message_id: Collection[str] = ()) -> str:
    """`<messageId>.json` for a channel type in `named_by_message_id` (spec 002: the heartbeat's),
    `<channel>_<messageId>_<timestamp>.json` otherwise (made safe)."""
    if payload.channel in named_by_message_id:
        return f"{safe_name(payload.messageId)}.json"
    return f"{safe_name(payload.channel)}_{safe_name(payload.messageId)}_{payload.timestamp}.json"


def conversation_of(reply: OutgoingPayload) -> str:
    """The conversation a reply is delivered in order with: its conversationId, else its sender."""
    return reply.conversationId or reply.senderId or reply.sender


class Head(Protocol):
    """The oldest unsent reply of a conversation, as its storage holds it."""

    @property
    def name(self) -> str:
        """Its spec-002 name (the file's, the row's)."""

    @property
    def payload(self) -> OutgoingPayload: ...

    @property
    def channel(self) -> Channel:
        """The running channel that sends it."""

    @property
    def attempts(self) -> int:
        """Its failed attempts so far."""

    @property
    def journal(self) -> SharedJournal | None:
        """Where its sent parts are recorded when not in the channel's own DeliveryJournal (SHARED_JOURNAL)."""

    def counts(self, exc: Exception) -> bool:
        """Whether a failure raised while sending is the platform's (an attempt); else it is the storage's
        own (e.g. its journal lost the row): raised on, never counted."""

    async def sent(self) -> None:
        """Records the reply as delivered: it leaves the conversation."""

    async def superseded(self) -> bool:
        """Whether a later reply of its conversation waits with the same stream: a draft or progress note
        whose `progressKey`, or a final answer whose `streamKey`, is this reply's `progressKey`."""

    async def retry(self, attempts: int, error: str, delay_s: float) -> None:
        """Records a failed attempt: the reply stays the head, due again after `delay_s`."""

    async def dead(self, reason: str, attempts: int) -> None:
        """Keeps the reply as undeliverable with its reason: it leaves the conversation."""


class Conversation(Protocol):
    """One conversation's unsent replies in their storage."""

    async def head(self) -> Head | None:
        """Its head when it is due; None when none is left (or its head waits in storage, see `wait`)."""

    async def wait(self, delay_s: float) -> bool:
        """Waits out a retried head's delay in place; False ends the drain instead (the storage
        starts it again when the head is due)."""

    async def failed(self, exc: Exception) -> bool:
        """Handles a failure of the storage itself; True tries the head again, False ends the drain."""


class BaseOutbox(ABC):
    """What every outbox does before it stores a reply: refuses the attachments its conversation may not
    receive, and stamps it with a timestamp never below the last one this process used (the names of
    spec 002 carry it). Each backend stores the reply in its own way (FileOutbox: a file in
    `queue/outgoing/`; gateway.backends.postgres.outbox.PgOutbox: a row).

    `named_by_message_id` holds the channel types whose replies are `<messageId>.json` (those whose
    channel declares `Channel.reply_named_by_message_id`; the gateway adds each as it builds it): a
    second reply to the same message replaces the first there.
    """

    def __init__(self, home: Home, events: EventLog, *, extra_roots: Sequence[str | os.PathLike[str]] = (),
                 named_by_message_id: Collection[str] = (),
                 on_written: Callable[[str, OutgoingPayload], None] | None = None):
        """`on_written(name, payload)` is told of each reply written where the gateway's delivery must be
        handed it (FileOutbox)."""
        self.home = home
        self.named_by_message_id = set(named_by_message_id)
        self.events = events
        self.attachments = AttachmentPolicy(home, extra_roots)
        self._last_ms = 0
        self._lock = threading.Lock()
        self._on_written = on_written

    def prepared(self, payload: OutgoingPayload) -> OutgoingPayload:
        """The payload as it will be stored: the files its conversation may receive (by their real paths)
        kept, the others dropped and named in its text."""
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

    def stamped(self, payload: OutgoingPayload, taken: Callable[[str], bool] = lambda name: False) -> str:
        """Sets the payload's timestamp (never below the last one used here, nor one whose name is
        `taken`, unless its channel's replies replace each other) and returns its spec-002 name."""
        with self._lock:
            payload.timestamp = max(payload.timestamp, now_ms(), self._last_ms + 1)
            while True:
                name = outgoing_name(payload, self.named_by_message_id)
                if payload.channel in self.named_by_message_id or not taken(name):
                    break
                payload.timestamp += 1
            self._last_ms = payload.timestamp
        return name

    @abstractmethod
    def write(self, payload: OutgoingPayload) -> Path | str:
        """Stores one payload (gateway.api.Outbox)."""

    @abstractmethod
    def holds_result(self, run_id: str, run_state: str, *, channel: str, message_id: str) -> bool:
        """gateway.api.Outbox.holds_result: whether a reply carrying this run's result is stored."""

    @abstractmethod
    def close(self) -> None:
        """Lets go of what the outbox holds open."""


class FileOutbox(BaseOutbox):
    """The gateway's one writer of `queue/outgoing/`: unique names, monotonic timestamps, safe files."""

    def __init__(self, home: Home, events: EventLog, *, extra_roots: Sequence[str | os.PathLike[str]] = (),
                 fsync: bool = True, named_by_message_id: Collection[str] = (),
                 on_written: Callable[[str, OutgoingPayload], None] | None = None):
        super().__init__(home, events, extra_roots=extra_roots, named_by_message_id=named_by_message_id,
                         on_written=on_written)
        self.fsync = fsync
        self._spares = SpareFiles(home.outgoing)

    def write(self, payload: OutgoingPayload) -> Path:
        """Writes one payload atomically; a refused attachment is dropped and named in the text.

        `on_written(name, payload)` then hands the payload to the dispatcher without a re-read.
        """
        payload = self.prepared(payload)
        path = self.home.outgoing / self.stamped(payload, lambda name: (self.home.outgoing / name).exists())
        atomic_write(path, payload.to_json(), fsync=self.fsync, spares=self._spares)
        if self._on_written is not None:
            self._on_written(path.name, payload)
        return path

    def holds_result(self, run_id: str, run_state: str, *, channel: str, message_id: str) -> bool:
        """Looks in outgoing/, sent/ and failed/ (in that order, the way files move) for a reply to the message
        carrying the run's result (not an ack or a question)."""
        pattern = f"*{glob.escape(safe_name(channel))}_{glob.escape(safe_name(message_id))}_*.json"
        for folder in (self.home.outgoing, self.home.sent, self.home.failed):
            if any(_carries_result(path, run_id, run_state) for path in folder.glob(pattern)):
                return True
        return False

    def close(self) -> None:
        """Removes the spare file kept ready in outgoing/."""
        self._spares.close()


def _carries_result(path: Path, run_id: str, run_state: str) -> bool:
    """Tells whether an outgoing payload file carries run `run_id` in `run_state`."""
    if path.name.endswith(".error.json"):
        return False
    try:
        payload = json.loads(path.read_bytes())
    except (OSError, ValueError):  # moved on meanwhile: the next folder has it
        return False
    return isinstance(payload, dict) and payload.get("workflowRunId") == run_id and payload.get("runState") == run_state
