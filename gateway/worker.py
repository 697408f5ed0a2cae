"""The worker loop: claim → schedule by ordering keys → handler → outgoing | retry | dead letter."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import ValidationError

from gateway.answered import AnsweredIndex
from gateway.api import Handler, Outbox, PermanentError
from gateway.events import EventLog, now_ms
from gateway.keys import KeyScheduler, ordering_keys
from gateway.locks import LockDirectory
from gateway.models import IncomingPayload, OutgoingPayload
from gateway.queue import Claimed, FileQueue
from gateway.settings import QueueSettings

log = logging.getLogger("switchyard.worker")

MAX_PENDING = 10_000
LOCK_RETRY_S = 0.05
APOLOGY = (
    "Sorry, I could not process your message (\"{preview}\") after {attempts} attempt(s). "
    "It has been kept for the operator; please try again later."
)


@dataclass
class _Job:
    claimed: Claimed
    message: IncomingPayload


def backoff_seconds(attempts: int, settings: QueueSettings) -> float:
    """Exponential backoff after `attempts` failures: initial × 2^(attempts-1), capped."""
    delay_ms: int = settings.backoff_initial_ms * 2 ** max(0, attempts - 1)
    return min(delay_ms, settings.backoff_max_ms) / 1000


def parse_payload(claimed: Claimed, max_bytes: int) -> IncomingPayload:
    """Validates a claimed file; raises ValueError with a reason a person can act on."""
    if len(claimed.data) > max_bytes:
        raise ValueError(f"payload larger than queue.max_payload_bytes ({max_bytes} bytes)")
    try:
        raw = json.loads(claimed.data)
    except ValueError as exc:
        raise ValueError(f"not valid JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise ValueError("not a JSON object")
    try:
        return IncomingPayload.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'payload'}: {e['msg']}" for e in exc.errors()
        )
        raise ValueError(f"wrong schema: {problems}") from exc


class Worker:
    """Claims messages in order and runs them through the handler, one at a time per ordering key."""

    def __init__(
        self,
        queue: FileQueue,
        handler: Handler,
        outbox: Outbox,
        answered: AnsweredIndex,
        events: EventLog,
        settings: QueueSettings,
        *,
        on_start: Callable[[IncomingPayload], None] | None = None,
        locks: LockDirectory | None = None,
    ):
        self.queue = queue
        self.handler = handler
        self.outbox = outbox
        self.answered = answered
        self.events = events
        self.settings = settings
        self.scheduler: KeyScheduler[_Job] = KeyScheduler(settings.max_concurrency, locks)
        self._locks = locks
        self._on_start = on_start
        self._wakeup = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopping = False
        self.processed = 0

    async def renew_locks(self) -> None:
        """Keeps the locks of long-running messages from expiring (runs until cancelled)."""
        if self._locks is None:
            return
        while True:
            await asyncio.sleep(self._locks.ttl_s / 3)
            self._locks.renew(self.scheduler.busy_keys())

    def wake(self) -> None:
        """Tells the loop that something changed (a new file, a finished job)."""
        self._wakeup.set()

    async def run(self) -> None:
        """Runs until `stop()`: claims whatever may start, then sleeps until woken or a backoff ends."""
        while not self._stopping:
            self._wakeup.clear()
            self._claim_and_start()
            timeout = self.queue.next_due_in()
            if self.scheduler.contended:  # another process holds a key: look again shortly
                timeout = min(timeout or LOCK_RETRY_S, LOCK_RETRY_S)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout)

    def _claim_and_start(self) -> None:
        self._start_ready()
        while self._wants_more() and (claimed := self.queue.claim()) is not None:
            self._accept(claimed)
            self._start_ready()
        for order in self.queue.take_vanished():
            self.scheduler.release_hold(order)
        self._start_ready()

    def _wants_more(self) -> bool:
        # Claims happen only while a slot is free; since ready messages were just started, every
        # pending one is blocked by a busy key, so looking further ahead keeps a slow key from
        # delaying independent ones. MAX_PENDING bounds the memory this may take.
        return (not self._stopping and self.scheduler.running < self.settings.max_concurrency
                and self.scheduler.pending_count < MAX_PENDING)

    def _accept(self, claimed: Claimed) -> None:
        try:
            message = parse_payload(claimed, self.queue.max_payload_bytes)
        except ValueError as exc:
            target = self.queue.dead_letter(claimed, str(exc))
            self.events.emit("message.invalid", job_id=claimed.name, reason=str(exc), file=target.name)
            return
        self.events.emit("message.claimed", job_id=claimed.name, channel=message.channel,
                         conversation=message.conversation, attempt=claimed.attempts + 1)
        self.scheduler.add(claimed.order, ordering_keys(message), _Job(claimed, message))

    def _start_ready(self) -> None:
        for keys, job in self.scheduler.ready():
            task = asyncio.create_task(self._process(job), name=f"message:{job.claimed.name}")
            self._tasks.add(task)
            task.add_done_callback(functools.partial(self._finished, keys=keys))

    def _finished(self, task: asyncio.Task[None], *, keys: tuple[str, ...]) -> None:
        self._tasks.discard(task)
        self.scheduler.finish(keys)
        if not task.cancelled() and task.exception() is not None:
            log.error("message task failed unexpectedly", exc_info=task.exception())
        self.wake()

    async def _process(self, job: _Job) -> None:
        claimed, message = job.claimed, job.message
        if self.answered.contains(message):
            self.queue.complete(claimed)
            self.events.emit("message.duplicate", job_id=claimed.name, channel=message.channel,
                             conversation=message.conversation, messageId=message.messageId)
            return
        if self._on_start is not None:
            self._on_start(message)
        try:
            replies = await self.handler.handle(message)
        except asyncio.CancelledError:
            self._requeue_uncounted(claimed)
            raise
        except PermanentError as exc:
            self._dead_letter(job, str(exc), claimed.attempts + 1)
            return
        except Exception as exc:
            log.warning("processing %s failed: %s", claimed.name, exc, exc_info=log.isEnabledFor(10))
            self._retry_or_dead_letter(job, f"{type(exc).__name__}: {exc}")
            return
        self._deliver(job, replies)

    def _deliver(self, job: _Job, replies: list[OutgoingPayload]) -> None:
        for reply in replies:
            self.outbox.write(reply)
        self.answered.record(job.message)
        self.queue.complete(job.claimed)
        self.processed += 1
        self.events.emit("job.succeeded", job_id=job.claimed.name, state="done", kind="message",
                         channel=job.message.channel, conversation=job.message.conversation,
                         replies=len(replies))

    def _retry_or_dead_letter(self, job: _Job, error: str) -> None:
        attempts = job.claimed.attempts + 1
        if attempts >= self.settings.max_attempts:
            job.claimed.errors.append(error)
            self._dead_letter(job, f"failed {attempts} time(s); last error: {error}", attempts)
            return
        delay = backoff_seconds(attempts, self.settings)
        fields = {"job_id": job.claimed.name, "channel": job.message.channel,
                  "conversation": job.message.conversation, "retries": attempts}
        self.events.emit("job.failed.retryable", state="failed", kind="message", reason=error,
                         failure_reason=error, **fields)
        self.queue.requeue(job.claimed, error, delay)
        self.scheduler.hold(job.claimed.order, ordering_keys(job.message))
        self.events.emit("job.requeued", state="queued", kind="message", backoff_ms=int(delay * 1000),
                         **fields)

    def _dead_letter(self, job: _Job, reason: str, attempts: int) -> None:
        target = self.queue.dead_letter(job.claimed, reason, attempts=attempts)
        self.events.emit("job.failed.final", job_id=job.claimed.name, state="failed_final", kind="message",
                         channel=job.message.channel, conversation=job.message.conversation,
                         reason=reason, failure_reason=reason, attempts=attempts, file=target.name)
        preview = job.message.message[:60] + ("…" if len(job.message.message) > 60 else "")
        apology = APOLOGY.format(preview=preview, attempts=attempts)
        self.outbox.write(OutgoingPayload.reply_to(job.message, apology, agent="switchyard",
                                                   timestamp=now_ms()))

    def _requeue_uncounted(self, claimed: Claimed) -> None:
        """Puts an interrupted message back for the next start, without counting an attempt."""
        try:
            claimed.path.rename(self.queue.home.incoming / claimed.name)
        except OSError as exc:
            log.error("could not return %s to incoming (recovered at next start): %s", claimed.name, exc)

    async def stop(self, grace_s: float) -> None:
        """Stops intake, lets running messages finish for `grace_s`, then cancels and requeues the rest."""
        self._stopping = True
        self.wake()
        if self._tasks:
            _, still_running = await asyncio.wait(set(self._tasks), timeout=grace_s)
            for task in still_running:
                task.cancel()
            await asyncio.gather(*still_running, return_exceptions=True)
        for job in self.scheduler.drain_pending():
            self._requeue_uncounted(job.claimed)
