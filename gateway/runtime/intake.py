"""Taking messages in: the `sink` every channel is started with (and the handler's `enqueue`), which writes a
payload into the spool (`queue/incoming/`), and the notices of files arriving there, which wake the runtime."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from gateway.channelkit.backoff import delay as backoff_delay
from gateway.channelkit.edits import to_queue
from gateway.telemetry import tracing

if TYPE_CHECKING:
    from pathlib import Path

    from gateway.home import Home
    from gateway.models import IncomingPayload
    from gateway.spool.queue import FileQueue
    from gateway.telemetry.events import EventLog

SINK_RETRY_S = 60.0  # how long a channel's message is retried into a refusing disk before it errs


class Intake:
    """Writes incoming payloads into the spool and tells the runtime (`wake`) that one is there."""

    def __init__(self, home: Home, queue: FileQueue, events: EventLog, wake: Callable[[], None]):
        self._home = home
        self._queue = queue
        self._events = events
        self._wake = wake

    async def sink(self, payload: IncomingPayload) -> Path:
        """Enqueues a channel's incoming payload (gateway.api.Sink).

        While the file system refuses the write (a full disk), it retries with backoff for up to
        SINK_RETRY_S, so a platform message already acknowledged is not lost to a short outage;
        then it raises, and the channel leaves the message unacknowledged where it can.
        """
        deadline = time.monotonic() + SINK_RETRY_S
        failures = 0
        payload = tracing.intake(payload)  # the message's trace starts here (telemetry on)
        while True:
            try:
                queued = to_queue(self._queue.fold_edit, payload)
                if queued is None:  # an edit, and its original still waits: edited in place
                    return self._home.incoming
                path = self._queue.enqueue(queued.to_json(), hint=f"{queued.channel}-{queued.messageId}")
                break
            except OSError as exc:
                failures += 1
                if failures == 1:
                    self._events.emit("queue.error", channel=payload.channel, reason=f"cannot enqueue: {exc}")
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(backoff_delay(failures, 0.2, 5.0))
        self.notice(path.name)
        return path

    def notice(self, name: str) -> None:
        """A file `name` arrived in the spool (written here, or seen by the folder watch)."""
        self._queue.notice(name)
        self._wake()

    def rescan(self) -> None:
        """The folder watch may have missed files: the spool is read again."""
        self._queue.rescan()
        self._wake()
