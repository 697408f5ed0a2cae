"""The storage backends: files (the default), postgres (many hosts), memory (tests). Each supplies stores
(gateway/stores.py) and never policy; none imports another.

Here: the runtime a backend builds (`Backend.runtime`), what the Gateway hands it and the steps it runs on it,
in this order: open, start (channels, processing, delivery), watch, run, wake, stats, prune, stop, release,
close; queue_view is what the dashboard reads, dead_letter what the handler calls for a message answered
before its work failed permanently (files: gateway/backends/files/runtime.py; memory: .../memory/runtime.py;
postgres: .../postgres/runtime.py). Only annotations name other modules' types, so importing a backend's
package stays light."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import asyncio

    from gateway.home import Home
    from gateway.models import IncomingPayload, OutgoingPayload
    from gateway.runtime.outbox import BaseOutbox
    from gateway.runtime.supervision import ChannelSupervisor
    from gateway.seams import Channel, Handler
    from gateway.settings import Settings
    from gateway.spool.queue import FileQueue
    from gateway.telemetry.events import EventLog

__all__ = ["Delivery", "QueueView", "Runtime", "RuntimeParts", "Watch"]

Watch = Callable[[Path, Any, Any], None]


@dataclass
class RuntimeParts:
    """What a Gateway gives its backend's runtime: no Gateway, only what the runtime uses of it."""

    home: Home
    settings: Settings
    events: EventLog
    queue: FileQueue  # incoming/, on both backends
    role: str  # "run" (channels and processing) or "worker" (processing only)
    supervisor: ChannelSupervisor
    show_typing: Callable[[IncomingPayload], Callable[[], None] | None]
    """Shows the typing indicator of a message's channel until it is answered; returns the stopper."""
    takes_receipts: Callable[[IncomingPayload], bool]
    """Whether the channel a message came from wants "queued" receipts."""
    receipt_profiles: Callable[[], list[str]]
    """The profile ids of the running channels that want "queued" receipts."""
    named_by_message_id: Collection[str]
    """The channel types whose replies are `<messageId>.json` (`switchyard_reply_named_by_message_id`)."""
    on_written: Callable[[str, OutgoingPayload], None]
    """Told of each reply the outbox writes as a file, to hand it to the delivery without a re-read."""


class Delivery(Protocol):
    """What the Gateway hands replies to: the file Dispatcher or PgDelivery."""

    def notice(self, name: str) -> None: ...
    def rescan(self) -> None: ...
    def schedule(self, name: str, payload: OutgoingPayload) -> None: ...
    def channel_for_incoming(self, message: IncomingPayload) -> Channel | None: ...
    async def stop(self, grace_s: float) -> None: ...


class QueueView(Protocol):
    """The queue as the dashboard reads it (on a worker thread) and its retry button (gateway/spool/folders.py
    FolderView, gateway/backends/postgres/dashboard.py PgQueueView).

    `live()` answers `queue` (rows of folder, depth, oldest_age_s) and either `processing` (the names
    in processing/) or `in_flight` (the messages running, as gateway.dashboard.state.Activity.in_flight lists
    them); `read` adds `dead_letters` (the first `shown`), `dead_total`, and whatever else the backend shows.
    """

    def live(self) -> dict[str, Any]: ...
    def read(self, shown: int) -> dict[str, Any]: ...
    def retry(self, names: list[str]) -> list[str]: ...


class Runtime(Protocol):
    """The steps the Gateway runs on its backend's runtime, in this order."""

    outbox: BaseOutbox

    @property
    def home_mode(self) -> str:
        """How the home is used, shown in `gateway.started` (the file backend: solo or shared)."""
        ...

    def close_events(self) -> None: ...
    def open(self) -> None: ...
    async def start(self, handler: Handler) -> Delivery | None: ...
    def watch(self, watch: Watch) -> None: ...
    def run(self) -> list[asyncio.Task[None]]: ...
    def wake(self) -> None: ...
    def stats(self) -> dict[str, Any]: ...
    async def prune(self) -> None: ...
    async def stop(self, grace_s: float) -> None: ...
    async def release(self) -> None: ...
    async def close(self) -> None: ...
    def queue_view(self) -> QueueView: ...
    def dead_letter(self, message: IncomingPayload, reason: str, errors: list[str]) -> str | None: ...
