"""What the Worker (gateway/runtime/worker.py) does with a claim that cannot run: an invalid payload moved to
the dead letters unread or with why it does not parse (its sender told when it says so), and claims that
failed, or a storage that refuses a write for now, reported without flooding the log."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from gateway.api import Outbox
from gateway.models import IncomingPayload, OutgoingPayload
from gateway.payloads import backoff_seconds
from gateway.settings import QueueSettings
from gateway.spool.queue import CLAIM_RETRY_S, Claimed
from gateway.stores import QueueStore
from gateway.telemetry.events import EventLog

log = logging.getLogger("switchyard.worker")

CLAIM_REPORT_S = 60.0


def quarantine(queue: QueueStore, outbox: Outbox, events: EventLog, claimed: Claimed, reason: str,
               apology: OutgoingPayload | None = None) -> None:
    """Moves an invalid payload to the dead letters (then writes `apology`, if any); if they refuse it, puts
    it back to try again later."""
    claimed.errors.append(reason)
    try:
        target = queue.dead_letter(claimed, reason)
    except OSError as exc:
        events.emit("queue.error", job_id=claimed.name, reason=f"cannot quarantine an invalid file: {exc}")
        with contextlib.suppress(OSError):  # else it stays in processing/ and returns at the next start
            queue.release(claimed, CLAIM_RETRY_S)
        return
    log.error("invalid payload %s moved to failed/%s: %s", claimed.name, target.name, reason)
    events.emit("message.invalid", job_id=claimed.name, reason=reason, file=target.name)
    if apology is not None:
        try:
            outbox.write(apology)
        except OSError as exc:  # the dead letter holds the reason; the sender is not told this time
            events.emit("queue.error", job_id=claimed.name, reason=f"cannot write the apology: {exc}")


class ClaimErrors:
    """Logs and emits claim failures: a new reason at once, the same one at most once a minute."""

    def __init__(self, events: EventLog):
        self.events = events
        self._last = ("", 0.0)

    def report(self, errors: list[str]) -> None:
        if not errors:
            return
        now = time.monotonic()
        if errors[0] == self._last[0] and now - self._last[1] < CLAIM_REPORT_S:
            return
        self._last = (errors[0], now)
        log.error("%s (%d claim failure(s); retrying)", errors[0], len(errors))
        self.events.emit("queue.error", reason=errors[0], failures=len(errors))


async def storage_pause(events: EventLog, settings: QueueSettings, job_id: str, message: IncomingPayload,
                        problem: str, failures: int) -> None:
    """Waits out the `failures`-th refusal in a row of a write of the message `job_id` (with backoff), said in
    the log the first time and as a `queue.error` event each time."""
    delay = backoff_seconds(failures, settings)
    if failures == 1:
        log.error("cannot %s (retrying every %.1fs at most until it works)", problem, settings.backoff_max_ms / 1000)
    events.emit("queue.error", job_id=job_id, channel=message.channel, conversation=message.conversation,
                reason=f"cannot {problem}", retry_ms=int(delay * 1000), failures=failures)
    await asyncio.sleep(delay)
