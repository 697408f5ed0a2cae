"""The seam between the backends and the one runtime (gateway/runtime/composed.py): what a backend gives it
(its `Processing`: the stores the Worker runs on, its replies' side where they are not the home's files, and the
steps only it knows: gateway/backends/files/processing.py, .../memory/processing.py, .../postgres/processing.py),
what the Gateway hands it (`RuntimeParts`: the Worker's maker, the send loop, the channels' supervision), and the
steps the Gateway runs on it (`Runtime`), in this order: open, start (channels, processing, delivery), watch,
run, wake, stats, prune, stop, release, close; queue_view is what the dashboard reads, dead_letter what the
handler calls for a message answered before its work failed permanently. Protocols and value types only: a
backend imports this module, never gateway.runtime."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import asyncio

    from gateway.channelkit.attachments import AttachmentPolicy
    from gateway.home import Home
    from gateway.models import IncomingPayload, OutgoingPayload
    from gateway.outbox import BaseOutbox, Conversation
    from gateway.seams import Channel, Handler
    from gateway.settings import ChannelProfile, Settings
    from gateway.spool.queue import Claimed, FileQueue
    from gateway.stores import AnsweredStore, Locks, QueueStore
    from gateway.telemetry.events import EventLog

__all__ = ["Compose", "Delivery", "HomeSharing", "MakeWorker", "Outgoing", "Processing", "QueueView", "Runtime",
           "RuntimeParts", "SendLoop", "StoreAnswer", "Supervision", "WantsReceipt", "Watch", "WorkerLoop",
           "WorkerStores"]

Watch = Callable[[Path, Callable[[str], None], Callable[[], None]], None]
"""Watches a folder: `on_name(name)` for each file that appears, `on_rescan()` when events may have been lost
(gateway/spool/watch.py's OnName and OnRescan)."""


class Supervision(Protocol):
    """The supervision of a gateway's channels (gateway/runtime/supervision.py ChannelSupervisor), as a runtime
    starts them: every profile at once (`start_each`), or one at a time under a lease (the postgres backend:
    `start`, then `running` or `failed`; `show` its state while another process owns it)."""

    channels: list[Channel]
    """The running channels, which the delivery sends through."""
    stopping: asyncio.Event
    """Set first thing when the gateway stops."""

    async def start(self, profile: ChannelProfile) -> Channel: ...
    def running(self, profile: ChannelProfile, channel: Channel, *, attempt: int,
                reason: str | None = None) -> None: ...
    def failed(self, profile: ChannelProfile, exc: BaseException, *, attempt: int) -> float | None: ...
    def show(self, profile: ChannelProfile, state: str, reason: str | None = None) -> None: ...
    async def start_each(self, profiles: list[ChannelProfile],
                         on_started: Callable[[Channel], None] = ...) -> list[Channel]: ...


class SendLoop(Protocol):
    """The delivery loop of replies, written once (gateway/runtime/sending.py Sender): a backend's delivery
    drains each conversation of its storage through it."""

    async def drain(self, conversation: Conversation, stopping: Callable[[], bool]) -> None:
        """Delivers a conversation's replies, head first, until none is due or `stopping()`."""
        ...

    def undeliverable(self, name: str, reason: str, attempts: int) -> None:
        """Logs and emits `outgoing.failed` for a reply its storage now keeps as dead."""
        ...


StoreAnswer = Callable[["Claimed", "IncomingPayload", "list[OutgoingPayload]"], bool]
"""Stores a message's replies, its answer and its completion in one step (True: stored; False: it was done
already); without one the Worker writes each reply, records the answer and completes it in turn."""


@dataclass(frozen=True)
class WorkerStores:
    """What a Worker (gateway/runtime/worker.py) runs on: the queue it claims from, the answered index, the
    outbox of the replies, the key locks (None: none; with `sharing`, only once the home is shared), the one
    step that stores an answer where the storage has one, and what the storage raises while it cannot be
    written (waited out with backoff, the message kept with its keys)."""

    queue: QueueStore
    answered: AnsweredStore
    outbox: BaseOutbox
    locks: Locks | None = None
    sharing: HomeSharing | None = None
    store_answer: StoreAnswer | None = None
    storage_errors: tuple[type[BaseException], ...] = (OSError,)


class WorkerLoop(Protocol):
    """A running Worker, as a runtime drives it."""

    def wake(self) -> None: ...
    def request_share(self) -> None: ...
    def tasks(self) -> list[asyncio.Task[None]]: ...
    def stats(self) -> dict[str, Any]: ...
    async def stop(self, grace_s: float) -> None: ...


WantsReceipt = Callable[["IncomingPayload"], bool]
"""Whether the sender of a message waiting behind its conversation is told it is queued (its channel's choice)."""


class MakeWorker(Protocol):
    """Makes the Worker of a runtime on its stores, for its handler (the Gateway's, with its events and settings).
    The runtime says who sends the "queued" receipts: the Worker, for the messages `wants_receipt` names, or
    (None) the runtime itself (postgres: from the database, once across processes)."""

    def __call__(self, stores: WorkerStores, handler: Handler, *,
                 wants_receipt: WantsReceipt | None) -> WorkerLoop: ...


@dataclass
class RuntimeParts:
    """What a Gateway gives its backend's runtime: no Gateway, only what the runtime uses of it."""

    home: Home
    settings: Settings
    events: EventLog
    queue: FileQueue  # incoming/, the spool every backend takes in from
    role: str  # "run" (channels and processing) or "worker" (processing only)
    supervisor: Supervision
    worker: MakeWorker
    """Makes the runtime's Worker on its stores (it shows typing and sends receipts where the channel wants them)."""
    wants_receipt: WantsReceipt
    """Whether a message's channel wants a "queued" receipt (given to a Worker that sends them)."""
    receipt_profiles: Callable[[], list[str]]
    """The profile ids of the running channels that want "queued" receipts."""
    named_by_message_id: Collection[str]
    """The channel types whose replies are `<messageId>.json` (`switchyard_reply_named_by_message_id`)."""
    on_written: Callable[[str, OutgoingPayload], None]
    """Told of each reply the outbox writes as a file, to hand it to the delivery without a re-read."""
    send_loop: Callable[[AttachmentPolicy], SendLoop]
    """Makes the delivery loop, sending the attachments `AttachmentPolicy` allows, for a delivery of its own."""


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


class HomeSharing(Protocol):
    """Whether other processes share the home (the file backend's SharedHome): the Worker takes key locks once
    it is shared, and takes those of what it runs before it lets another process in."""

    @property
    def mode(self) -> str:
        """"waiting" (for the lone process to share), "solo" or "shared"."""
        ...

    def poll(self) -> bool: ...
    def requested(self) -> bool: ...
    def share(self) -> bool: ...


class Outgoing(Protocol):
    """A runtime's replies: the outbox they are stored in and, in a `run`, the channels that send them and the
    delivery through those (gateway/runtime/outgoing.py OutgoingFolder: the home's queue/outgoing/;
    gateway/backends/postgres/outgoing.py PgOutgoing: the database's outbox, each channel under its lease)."""

    @property
    def outbox(self) -> BaseOutbox:
        """Where the replies are stored."""
        ...

    @property
    def sends_receipts(self) -> bool:
        """True when it tells the senders of messages waiting behind their conversation itself (postgres: from the
    database, once across processes); else the Worker does."""
        ...

    async def start_channels(self) -> None:
        """Starts the channels (a `run`; a `worker` runs none), before processing starts."""
        ...

    def start_delivery(self) -> Delivery | None:
        """Starts delivering through the running channels (a `run`; None for a `worker`)."""
        ...

    def tasks(self) -> list[asyncio.Task[None]]:
        """Its loops, started (from the runtime's `run`)."""
        ...

    async def stop(self) -> None:
        """Before processing stops: no more receipts (its channels are about to stop)."""
        ...

    async def release(self) -> None:
        """After the channels stopped: what it held for them (postgres: their leases)."""
        ...

    async def prune(self) -> None:
        """Removes the sent replies kept past their retention (where it keeps them)."""
        ...


class Processing(Protocol):
    """What a backend gives the one runtime (gateway/runtime/composed.py): the stores the Worker runs on, its
    replies (`outgoing`: None when they are the home's files) and the steps of its own around them. A backend
    subclasses it: the steps it has none of are the no-ops written here."""

    @property
    def home_mode(self) -> str:
        """How the home is used, shown in `gateway.started` (the file backend: solo or shared)."""
        ...

    @property
    def outgoing(self) -> Outgoing | None:
        """Its replies' side; None: the home's queue/outgoing/ (the runtime's OutgoingFolder)."""
        return None

    def worker_stores(self, outbox: BaseOutbox) -> WorkerStores:
        """What the Worker runs on, its replies stored in `outbox`."""
        ...

    def close_events(self) -> None:
        """Stops copying the event log where the backend keeps it too (postgres: switchyard_events)."""
        return None

    def open(self) -> None:
        """Before the handler starts: its stores opened, what an earlier process left claimed put back."""
        return None

    async def start(self, worker: WorkerLoop) -> None:
        """Once the Worker is made: what takes messages in and keeps this process known (postgres: its intake,
        its heartbeat, a poll of the table), started."""
        return None

    def watch(self, watch: Watch, share_requested: Callable[[], None]) -> None:
        """Watches what it must (the file backend: other processes asking to share the home)."""
        return None

    def attach(self, wake: Callable[[], None]) -> None:
        """From `run`: `wake` is called (from any thread) when another host queued a message."""
        return None

    def take_in(self) -> bool:
        """Moves what the channels wrote into incoming/ onto its queue (the file backend's queue is incoming/);
        True when the Worker should look now (False: its intake wakes the Worker once a message is in)."""
        return True

    def stats(self) -> dict[str, Any]:
        """Its figures beside the Worker's, for `queue_stats`."""
        return {}

    async def prune(self) -> None:
        """Deletes what retention allows from what it keeps (postgres: the shared tables)."""
        return None

    def stop_intake(self) -> None:
        """First thing when stopping, before the Worker finishes what it has: no more taking in."""
        return None

    async def stop(self) -> None:
        """After the Worker stopped: its loops ended, this process's place given up."""
        return None

    def queue_view(self) -> QueueView:
        """The queue as the dashboard reads it."""
        ...

    def dead_letter(self, message: IncomingPayload, reason: str, errors: list[str]) -> str | None:
        """gateway.api.LateDeadLetter: into the backend's dead letters."""
        ...

    def close(self) -> None:
        """Its stores closed (after the runtime stopped)."""
        return None


Compose = Callable[[Processing], Runtime]
"""Makes the runtime of a backend's Processing (given to `Backend.runtime` by the composition)."""
