"""The two ends a message passes between, below the rest of the contract (gateway.api re-exports them): the
Channel it comes in and goes back out through, the Handler that answers it, and the PermanentError either
raises to give a message up. Here, not in gateway/api.py, so the stores' protocols (gateway/stores.py: the
runtime a Backend builds runs a Handler and Channels) need not import the module whose HandlerContext
names the Backend."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from gateway.models import IncomingPayload, OutgoingPayload

Sink = Callable[[IncomingPayload], Awaitable[Path]]
"""Enqueues an incoming payload atomically (tmp + rename into `queue/incoming/`); returns its path."""


class PermanentError(Exception):
    """A failure that retrying cannot fix: the message goes to `failed/` at once with this reason.

    `reply`, when given, is what the sender is told instead of the generic apology (say what went
    wrong and how it is fixed).
    """

    def __init__(self, message: str, *, reply: str | None = None):
        super().__init__(message)
        self.reply = reply


@dataclass
class DeliveryRecord:
    """What a channel reports after sending: the platform's message ids of each chunk sent."""

    platform_ids: list[str] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Channel(Protocol):
    """A running connection to one chat platform profile, returned by `switchyard_channels`.

    Optional class attributes, read with `getattr` (not protocol members, so older plugins still match):
    `takes_receipts` (default True) and `reply_named_by_message_id` (default False): when True, replies
    to this channel type are written as `outgoing/<messageId>.json` (spec 002's heartbeat name; a later
    reply to the same message replaces an earlier one) instead of `<channel>_<messageId>_<timestamp>.json`,
    for a probe that waits for one answer under a name it knows. Declare that name with the hook
    `switchyard_reply_named_by_message_id` instead: it holds while no profile of the type runs.
    """

    name: str
    profile_id: str
    edits_progress: bool = False
    """Whether `send` shows progress notes (payloads with the same `progressKey` in one conversation)
    as one message edited in place; False: each note is posted as an ordinary message. Core code
    reads it with `getattr(channel, "edits_progress", False)`, as plugins may predate it. Such a channel
    also gets the drafts of a streamed answer (notes with `draft: true`) and edits the preview into the
    answer naming it (`streamKey`, see gateway.channelkit.notes.replacing_preview); a channel without it gets the answer
    only. Its optional class attribute `edit_interval_sec` (default 0) is the least time between two edits
    of one stream, the platform's limit (read with `getattr` too); a method `edit_interval_for(conversation)`,
    where present, gives it per chat instead."""
    shows_buttons: bool = False
    """Whether `send` shows a reply's `buttons` as platform buttons (a tap then comes back as a payload
    with `button`); False: they are a numbered list in the text. Read with `getattr(channel,
    "shows_buttons", False)`, as plugins may predate it."""

    async def start(self, sink: Sink) -> None:
        """Connects and starts turning platform messages into incoming payloads via `sink`."""

    async def send(self, outgoing: OutgoingPayload) -> DeliveryRecord | None:
        """Delivers one outgoing payload; raises DeliveryError to have it retried."""

    async def stop(self) -> None:
        """Disconnects; called once at shutdown."""


class Handler(Protocol):
    """What the worker calls for each claimed message (the orchestrator implements it).

    A handler may also have `reload_settings(settings: Settings) -> None`, which the gateway calls with
    the settings.yaml sections reloaded while it runs (gateway/runtime/reload.py); it is looked up with
    getattr, as a handler may predate it."""

    async def start(self) -> None:
        """Starts background work (e.g. the run executor)."""

    async def handle(self, message: IncomingPayload) -> list[OutgoingPayload]:
        """Answers one message; raises to have it retried, PermanentError to dead-letter it."""

    async def stop(self) -> None:
        """Stops background work, leaving persisted state resumable."""
