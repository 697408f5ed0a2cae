"""Receipts: a message that waits behind others of its conversation is told so, once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from gateway.api import Outbox
from gateway.models import IncomingPayload
from gateway.payloads import receipt_for, receipt_sent
from gateway.telemetry.events import EventLog

log = logging.getLogger("switchyard.receipts")

Order = tuple[int, str]


def takes_receipts(channel: object) -> bool:
    """Whether a channel is a chat that wants "queued" receipts (a probe or a job queue says no)."""
    return bool(getattr(channel, "takes_receipts", True))


class Receipts:
    """Sends a receipt for a claimed message still waiting `after_sec` after its claim because earlier
    messages of its conversation run or wait; nothing once it has started. `ahead(order)` says how
    many messages are in front of it (0: it is not waiting for its keys); `wanted(message)` whether
    its channel takes receipts (a heartbeat or an inbox job does not)."""

    def __init__(
        self, outbox: Outbox, events: EventLog, *, after_sec: float, ahead: Callable[[Order], int],
        wanted: Callable[[IncomingPayload], bool],
    ):
        self._outbox = outbox
        self._events = events
        self._after = after_sec
        self._ahead = ahead
        self._wanted = wanted
        self._timers: dict[Order, asyncio.TimerHandle] = {}

    def claimed(self, order: Order, message: IncomingPayload) -> None:
        """Starts the clock of a message just claimed (and not started at once)."""
        if self._after <= 0 or order in self._timers or self._ahead(order) <= 0 or not self._wanted(message):
            return  # (the usual case, a conversation with nothing running, costs one look at its keys)
        loop = asyncio.get_running_loop()
        self._timers[order] = loop.call_later(self._after, self._send, order, message)

    def started(self, order: Order) -> None:
        """The message started (or left the queue): no receipt for it any more."""
        timer = self._timers.pop(order, None)
        if timer is not None:
            timer.cancel()

    def close(self) -> None:
        """Cancels every pending receipt."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()

    def _send(self, order: Order, message: IncomingPayload) -> None:
        self._timers.pop(order, None)
        ahead = self._ahead(order)
        if ahead <= 0:
            return
        try:
            self._outbox.write(receipt_for(message, ahead))
        except OSError as exc:  # a receipt is a courtesy; the message itself is safe in the queue
            log.warning("cannot write a receipt for %s: %s", message.messageId, exc)
            return
        receipt_sent(self._events, message, ahead)
