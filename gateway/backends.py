"""The backend-specific half of a Gateway: how messages are queued, processed and delivered.

`build_backend` picks one from `queue.backend`. The Gateway (gateway/app.py) runs the lifecycle and
calls the same steps on either: `open`, `start` (channels, processing, delivery), `watch`, `run`,
`wake`, `stats`, `prune`, `stop`, `release`, `close`; `queue_view` is what the dashboard reads, and
`dead_letter` what the handler calls for a message answered before its work failed permanently.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from gateway.aio import wait_event
from gateway.answered import AnsweredIndex
from gateway.api import Channel, Handler, PermanentError
from gateway.backoff import delay as backoff_delay
from gateway.dashboard.state import FolderView, QueueView
from gateway.dispatcher import Dispatcher
from gateway.home import Home
from gateway.latedead import FileLateDeadLetters
from gateway.locks import LockDirectory
from gateway.models import IncomingPayload, OutgoingPayload
from gateway.outbox import BaseOutbox, FileOutbox
from gateway.receipts import Receipts
from gateway.settings import ChannelProfile, Settings
from gateway.sharing import SharedHome
from gateway.worker import Worker

if TYPE_CHECKING:
    from gateway.app import Gateway

log = logging.getLogger("switchyard")

Watch = Callable[[Path, Any, Any], None]


def extra_file_roots(home: Home, settings: Settings) -> list[Path]:
    """The folders an operator opened to every conversation (`files.extra_roots`); beyond them a reply
    carries only its own conversation's files (gateway/attachments.py)."""
    return [home.resolve(extra) for extra in settings.files.extra_roots]


class Delivery(Protocol):
    """What the Gateway hands replies to: the file Dispatcher or PgDelivery."""

    def notice(self, name: str) -> None: ...
    def rescan(self) -> None: ...
    def schedule(self, name: str, payload: OutgoingPayload) -> None: ...
    def channel_for_incoming(self, message: IncomingPayload) -> Channel | None: ...
    async def stop(self, grace_s: float) -> None: ...


class Backend(Protocol):
    """The steps the Gateway runs on its backend, in this order."""

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


def build_backend(gateway: Gateway, *, retry_s: tuple[float, float]) -> Backend:
    """The backend `queue.backend` names; `retry_s` paces a file backend's channel restarts (initial, max)."""
    if gateway.settings.queue.backend == "postgres":  # imported only then: no psycopg on the file backend
        return PostgresBackend(gateway)
    return FileBackend(gateway, retry_s=retry_s)


class FileBackend:
    """The embedded default: the FileQueue's Worker (with receipts, locks, a shared home), the channels
    started with retries, and the Dispatcher of queue/outgoing/."""

    def __init__(self, gateway: Gateway, *, retry_s: tuple[float, float]):
        self.gateway = gateway
        home, settings, qs = gateway.home, gateway.settings, gateway.settings.queue
        self.answered = AnsweredIndex(home.state / "answered.jsonl", window_sec=qs.duplicate_window_sec,
                                      fsync=qs.fsync)
        self.outbox: BaseOutbox = FileOutbox(home, gateway.events, extra_roots=extra_file_roots(home, settings),
                                             fsync=qs.fsync)
        self.sharing = SharedHome(home.state)
        self.late_dead = FileLateDeadLetters(home, self.answered, fsync=qs.fsync,
                                             max_payload_bytes=qs.max_payload_bytes)
        self.worker: Worker | None = None
        self.dispatcher: Dispatcher | None = None
        self._retry_s = retry_s

    @property
    def home_mode(self) -> str:
        return self.sharing.mode

    def close_events(self) -> None:
        return None

    def open(self) -> None:
        self.answered.open()

    async def start(self, handler: Handler) -> Delivery | None:
        """Starts the channels (a `run`), the worker with its receipts, and the dispatcher."""
        gateway = self.gateway
        qs = gateway.settings.queue
        if gateway.role == "run":
            gateway.channels = await self._start_channels()
        locks = LockDirectory(gateway.home.coordination / "locks",
                              holder=f"{socket.gethostname()}:{os.getpid()}", ttl_s=qs.lock_ttl_sec)
        self.sharing.open()
        self.worker = Worker(gateway.queue, handler, self.outbox, self.answered, gateway.events, qs,
                             on_start=gateway._show_typing, locks=locks, sharing=self.sharing)
        self.worker.receipts = Receipts(self.outbox, gateway.events, after_sec=qs.receipt_after_sec,
                                        ahead=self.worker.scheduler.ahead_of, wanted=gateway._takes_receipts)
        if gateway.role == "run":
            self.dispatcher = Dispatcher(gateway.home, gateway.channels, gateway.events, qs,
                                         extra_roots=extra_file_roots(gateway.home, gateway.settings))
        return self.dispatcher

    def watch(self, watch: Watch) -> None:
        """Watches the requests of other processes to share the home."""
        watch(self.sharing.requests, lambda name: self._share_requested(), self._share_requested)
        self._share_requested()

    def _share_requested(self) -> None:
        if self.worker is not None:
            self.worker.request_share()

    def run(self) -> list[asyncio.Task[None]]:
        assert self.worker is not None
        return [asyncio.create_task(self.worker.run(), name="worker"),
                asyncio.create_task(self.worker.renew_locks(), name="renew-locks")]

    def wake(self) -> None:
        if self.worker is not None:
            self.worker.wake()

    def stats(self) -> dict[str, Any]:
        worker = self.worker
        if worker is None:
            return {}
        return {"running": worker.scheduler.running, "pending": worker.scheduler.pending_count,
                "processed": worker.processed}

    async def prune(self) -> None:
        if self.dispatcher is not None:
            with suppress(OSError):
                self.dispatcher.prune_sent()

    async def stop(self, grace_s: float) -> None:
        """Finishes or requeues the messages in hand."""
        if self.worker is not None:
            await self.worker.stop(grace_s)

    async def release(self) -> None:
        return None

    async def close(self) -> None:
        self.answered.close()
        self.sharing.close()

    def queue_view(self) -> QueueView:
        return FolderView(self.gateway.home)

    def dead_letter(self, message: IncomingPayload, reason: str, errors: list[str]) -> str | None:
        """gateway.api.LateDeadLetter: into failed/ (gateway/latedead.py)."""
        return self.late_dead.bury(message, reason, errors)

    # --- channels -----------------------------------------------------------------------------

    async def _start_channels(self) -> list[Channel]:
        started = []
        for profile in self.gateway.settings.channels:
            channel = await self._try_start(profile)
            if channel is not None:
                started.append(channel)
        return started

    async def _try_start(self, profile: ChannelProfile) -> Channel | None:
        """Starts a profile; a configuration problem disables it, any other failure (a platform that
        is down, a timeout) is retried in the background with jittered backoff."""
        try:
            channel = await self.gateway._start_channel(profile)
        except Exception as exc:
            self._channel_failed(profile, exc, attempt=1)
            return None
        self.gateway.channel_status[profile.id] = {"type": profile.type, "state": "running"}
        return channel

    def _channel_failed(self, profile: ChannelProfile, exc: Exception, *, attempt: int) -> None:
        gateway = self.gateway
        reason = gateway.events.redact(str(exc) or type(exc).__name__)
        retrying = not isinstance(exc, (PermanentError, ValueError, TypeError, KeyError))
        state = "retrying" if retrying else "disabled"
        log.error("channel %s (%s) is %s: %s", profile.id, profile.type, state, reason)
        gateway.events.emit("channel.retrying" if retrying else "channel.disabled", channel=profile.type,
                            profile=profile.id, reason=reason, attempt=attempt)
        gateway.channel_status[profile.id] = {"type": profile.type, "state": state, "reason": reason}
        if retrying and attempt == 1:
            gateway._tasks.append(asyncio.create_task(self._retry_start(profile),
                                                      name=f"channel-retry:{profile.id}"))

    async def _retry_start(self, profile: ChannelProfile) -> None:
        """Retries a failed channel with backoff until it starts, is disabled, or the gateway stops."""
        gateway = self.gateway
        initial_s, max_s = self._retry_s
        for attempt in itertools.count(2):
            pause = backoff_delay(attempt - 1, initial_s, max_s, jitter=(0.5, 1.0))
            if await wait_event(gateway._stopping, pause):
                return
            try:
                channel = await gateway._start_channel(profile)
            except Exception as exc:
                if gateway._stopping.is_set():  # a plugin may turn our cancellation into its own error
                    return
                self._channel_failed(profile, exc, attempt=attempt)
                if gateway.channel_status[profile.id]["state"] == "disabled":
                    return
                continue
            if gateway._stopping.is_set():  # started while stopping: the stop path no longer looks at it
                await channel.stop()
                return
            gateway.channels.append(channel)
            gateway.channel_status[profile.id] = {"type": profile.type, "state": "running"}
            gateway.events.emit("channel.started", channel=profile.type, profile=profile.id, attempt=attempt)
            gateway._write_status()
            if self.dispatcher is not None:
                self.dispatcher.add_channel(channel)
            return


class PostgresBackend:
    """`queue.backend: postgres`: PgBackend takes in and processes; in a `run`, PgOutbound runs the
    channels under their leases and delivers from the database, and PgReceipts tells the senders of
    its profiles that wait behind their conversation."""

    home_mode = "database"

    def __init__(self, gateway: Gateway):
        from gateway.pg.backend import PgBackend
        from gateway.pg.db import dsn_from_settings
        from gateway.pg.events import attach_event_sink

        self.gateway = gateway
        self.dsn = dsn_from_settings(gateway.settings.queue)
        self.close_events = attach_event_sink(gateway.events, self.dsn)  # every event also into switchyard_events
        self.pg = PgBackend(gateway.home, gateway.settings, gateway.events, role=gateway.role,
                            extra_roots=extra_file_roots(gateway.home, gateway.settings))
        self.outbox: BaseOutbox = self.pg.outbox
        self.outbound: Any = None  # a PgOutbound in a `run`
        self.receipts: Any = None  # a PgReceipts in a `run`
        self._receipts_task: asyncio.Task[None] | None = None

    def open(self) -> None:
        return None

    async def start(self, handler: Handler) -> Delivery | None:
        """Takes the free channel leases and starts their channels (a `run`), then processing."""
        gateway = self.gateway
        if gateway.role == "run":
            from gateway.pg.outbound import PgOutbound

            self.outbound = PgOutbound(gateway)  # each profile connected here only while this process owns it
            gateway.channels = await self.outbound.start()
        await self.pg.start(handler, gateway.queue, on_start=gateway._show_typing)
        if self.outbound is None:
            return None
        from gateway.pg.receipts import PgReceipts

        self.receipts = PgReceipts(self.dsn, self.pg.outbox, gateway.events, gateway.settings.queue,
                                   profiles=gateway.receipt_profiles)
        return self.outbound.delivery  # type: ignore[no-any-return]

    def watch(self, watch: Watch) -> None:
        return None

    def run(self) -> list[asyncio.Task[None]]:
        self.pg.wake()
        if self.receipts is None:
            return []
        self._receipts_task = asyncio.create_task(self.receipts.run(), name="pg-receipts")
        return [self._receipts_task]

    def wake(self) -> None:
        self.pg.wake()

    def stats(self) -> dict[str, Any]:
        return self.pg.stats()

    async def prune(self) -> None:
        await self.pg.prune()  # every shared table, sent replies included, whatever this process's role

    async def stop(self, grace_s: float) -> None:
        """Stops sending receipts (its channels are about to stop), then processing."""
        if self._receipts_task is not None:
            self._receipts_task.cancel()
            await asyncio.gather(self._receipts_task, return_exceptions=True)
        await self.pg.stop(grace_s)

    async def release(self) -> None:
        """Releases the leases once their channels are stopped."""
        if self.outbound is not None:
            await self.outbound.stop()

    async def close(self) -> None:
        """Closes the process's shared pools (after the handler: it may still push a result while stopping)."""
        from gateway.pg.db import close_shared_pools

        await asyncio.to_thread(close_shared_pools)

    def queue_view(self) -> QueueView:
        from gateway.pg.dashboard import PgQueueView

        return PgQueueView(self.dsn, self.gateway.settings.queue, self.gateway.home)

    def dead_letter(self, message: IncomingPayload, reason: str, errors: list[str]) -> str | None:
        """gateway.api.LateDeadLetter: its row turned dead (gateway/pg/latedead.py)."""
        from gateway.pg.latedead import PgLateDeadLetters

        return PgLateDeadLetters(self.dsn).bury(message, reason, errors)
