"""The worker loop: claim → schedule by ordering keys → handler → outgoing | retry | dead letter."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from gateway.aio import finish_or_cancel, wait_event
from gateway.api import Handler
from gateway.channelkit.edits import edited_bytes
from gateway.models import IncomingPayload, UnstorableText
from gateway.payloads import ordering_keys, parse_payload
from gateway.runtime.claims import ClaimErrors, quarantine, storage_pause
from gateway.runtime.keys import KeyScheduler
from gateway.runtime.outcome import Dead, Done, Retry, dead, handled, push_unless_held
from gateway.runtime.receipts import Receipts
from gateway.settings import QueueSettings
from gateway.spool.queue import CLAIM_RETRY_S, Claimed
from gateway.storable import made_safe
from gateway.telemetry import tracing
from gateway.telemetry.events import EventLog

if TYPE_CHECKING:
    from gateway.backends.runtime import WorkerStores

log = logging.getLogger("switchyard.worker")

MAX_PENDING = 10_000
LOCK_RETRY_S = 0.05
T = TypeVar("T")

@dataclass
class _Job:
    claimed: Claimed
    message: IncomingPayload
    started: float = 0.0  # time.monotonic() when its processing began


class Worker:
    """Claims messages in order and runs them through the handler, one at a time per ordering key.

    On the WorkerStores any backend's Processing hands the one runtime (gateway/runtime/composed.py); made by the
    Gateway (gateway.backends.runtime.MakeWorker). Without `sharing` but with `locks`, key locks are on from the
    start (hosts sharing one queue). `on_start(message)` shows typing until it is answered;
    `wants_receipt(message)`: whether its channel takes "queued" receipts (None: the runtime sends them itself, not
    this Worker). Any error of a message's bookkeeping but the storage's own (`storage_errors`) is that message's
    failure, never the queue's."""

    def __init__(self, stores: WorkerStores, handler: Handler, events: EventLog, settings: QueueSettings, *,
                 on_start: Callable[[IncomingPayload], Callable[[], None] | None] | None = None,
                 wants_receipt: Callable[[IncomingPayload], bool] | None = None):
        self.queue, self.answered, self.outbox = stores.queue, stores.answered, stores.outbox
        self.handler = handler
        self.events = events
        self.settings = settings
        self.scheduler: KeyScheduler[_Job] = KeyScheduler(
            settings.max_concurrency, None if stores.sharing else stores.locks, lock_errors=stores.storage_errors)
        self._locks = stores.locks
        self._sharing = stores.sharing
        self._share_requested = False
        self._waiting_logged = False
        self._blocked: set[str] = set()  # keys another process holds, found in this claim pass
        self._contended = False  # a file was left in incoming/ because another process holds its key
        self._claim_errors = ClaimErrors(events)
        self._on_start = on_start
        self._store_answer = stores.store_answer
        self._storage_errors = stores.storage_errors
        self._wakeup = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopping = False
        if hasattr(self.queue, "pending_edits"):  # an edit of a message claimed here but not started folds into it
            self.queue.pending_edits = self.fold_pending
        self.processed = 0
        self.receipts = None if wants_receipt is None else Receipts(
            self.outbox, events, after_sec=settings.receipt_after_sec, ahead=self.scheduler.ahead_of,
            wanted=wants_receipt)

    async def renew_locks(self) -> None:
        """Keeps the locks of long-running messages from expiring (runs until cancelled)."""
        if self._locks is None:
            return
        while True:
            await asyncio.sleep(self._locks.ttl_s / 3)
            try:
                keys = self.scheduler.locked_keys()
                lost = set(keys) - set(self._locks.renew(keys))
                if lost:  # expired while the storage was away: taken again before their next message
                    log.warning("lost the locks of %s while they could not be renewed", ", ".join(sorted(lost)))
                    self.scheduler.lost_locks(lost)
                if self.scheduler.locks is not None:  # a backstop: a dead process's stale locks swept by others
                    self._recover_dead_workers()
            except self._storage_errors as exc:  # tried again at the next renewal
                log.warning("cannot renew the key locks: %s", exc)

    def request_share(self) -> None:
        """Tells the loop that another process may have asked to share the home
        (gateway.backends.runtime.HomeSharing)."""
        self._share_requested = True
        self.wake()

    def _settle_sharing(self) -> bool:
        """Takes or adjusts this process's place on a shared home; False while it must wait."""
        sharing = self._sharing
        if sharing is None:
            return True
        if sharing.mode == "waiting":
            if not sharing.poll():
                if not self._waiting_logged:
                    log.warning("another switchyard process is alone on this home; waiting for it to share it")
                    self._waiting_logged = True
                return False
            self._recover_dead_workers()  # the process this one waited for may have died holding messages
        if sharing.mode == "shared" and self.scheduler.locks is None:
            self.scheduler.locks = self._locks
        if sharing.mode == "solo" and self._share_requested and self._locks is not None:
            self._share_requested = False
            if sharing.requested():
                if self.scheduler.lock_running(self._locks) and sharing.share():
                    self.events.emit("queue.shared", reason="another process shares this home: key locks on")
                else:
                    self._share_requested = True  # a running key is locked elsewhere: try again shortly
        return True

    def wake(self) -> None:
        """Tells the loop that something changed (a new file, a finished job)."""
        self._wakeup.set()

    def tasks(self) -> list[asyncio.Task[None]]:
        """Its loop and the renewal of its key locks, started (a runtime's `run`)."""
        return [asyncio.create_task(self.run(), name="worker"),
                asyncio.create_task(self.renew_locks(), name="renew-locks")]

    def stats(self) -> dict[str, Any]:
        """What a runtime's `stats` reports of it: messages running, waiting for their key, processed."""
        return {"running": self.scheduler.running, "pending": self.scheduler.pending_count,
                "processed": self.processed}

    async def run(self) -> None:
        """Runs until `stop()`: claims whatever may start, then sleeps until woken or a backoff ends."""
        while not self._stopping:
            self._wakeup.clear()
            if not self._settle_sharing():
                await asyncio.sleep(LOCK_RETRY_S)
                continue
            try:
                self._claim_and_start()
                timeout = self.queue.next_due_in()
            except Exception as exc:  # never let the loop die: log, report, look again shortly
                log.exception("claiming failed")
                self.events.emit("queue.error", reason=f"claiming failed: {type(exc).__name__}: {exc}")
                await asyncio.sleep(CLAIM_RETRY_S)
                continue
            if self.scheduler.contended or self._contended or self._share_requested:  # held elsewhere: look again
                timeout = min(timeout or LOCK_RETRY_S, LOCK_RETRY_S)
            await wait_event(self._wakeup, timeout)

    def _claim_and_start(self) -> None:
        self._start_ready()
        shared = self.scheduler.locks is not None
        self._blocked.clear()
        self._contended = False
        while self._wants_more() and (claimed := self._claim(shared)) is not None:
            self._accept(claimed)
            self._start_ready()
        self.queue.end_pass()
        for order in self.queue.take_vanished():
            self.scheduler.release_hold(order)
        if shared:
            self.scheduler.release_idle()  # keys reserved for a file that vanished or proved invalid
        self._claim_errors.report(self.queue.take_claim_errors())
        self._start_ready()

    def _claim(self, shared: bool) -> Claimed | None:
        """The next file to run: the oldest one alone on a home, the oldest admitted one if shared."""
        if not shared:
            return self.queue.claim()  # no key locks: the fast path, one rename and one read
        return self.queue.claim_admitted(self._keys_of, self._admit)

    def _keys_of(self, data: bytes) -> tuple[str, ...]:
        """The ordering keys of a payload file's bytes; none for an invalid one."""
        try:
            return ordering_keys(parse_payload(data, self.settings.max_payload_bytes))
        except ValueError:
            return ()

    def _admit(self, keys: tuple[str, ...]) -> bool:
        """Whether a file of `keys` may be claimed now, on a shared home: this process holds or takes
        the locks of all its keys, and no older file of one of them was left in incoming/ in this
        pass (that one goes first, whoever takes it). A refused file's keys are blocked for the rest
        of the pass, so no younger file of any of them is claimed ahead of it."""
        if self._blocked.isdisjoint(keys) and self._reserve(keys):
            return True
        self._blocked.update(keys)
        self._contended = True
        return False

    def _reserve(self, keys: tuple[str, ...]) -> bool:
        """Takes the locks of `keys`; when one was taken over from a dead process, first returns what
        that process had claimed to incoming/ (refusing this file: an older one may be among them)."""
        assert self._locks is not None
        reclaimed = self._locks.reclaimed
        if not self.scheduler.reserve(keys):
            return False
        if self._locks.reclaimed == reclaimed:
            return True
        self._recover_dead_workers()
        return False

    def _recover_dead_workers(self) -> None:
        for action in self.queue.recover_dead_workers():
            self.events.emit("queue.recovered", reason=action)

    def fold_pending(self, edit: IncomingPayload) -> bool:
        """Puts an edit's text into its original when this worker claimed it and it has not started (it waits
        behind its conversation): the claimed bytes are rewritten where they are, so a restart keeps the edit.
        On the event loop, as starting is: a message is either still pending here or started."""
        for job in self.scheduler.pending_items():
            edited = edited_bytes(job.claimed.data, edit)
            if edited is not None:
                self.queue.rewrite_claimed(job.claimed, edited)
                job.claimed.data = edited
                job.message = parse_payload(edited, self.settings.max_payload_bytes)
                return True
        return False

    def _wants_more(self) -> bool:
        # Claims happen only while a slot is free; every pending one is blocked by a busy key, so looking
        # further ahead keeps a slow key from delaying independent ones (MAX_PENDING bounds the memory).
        return (not self._stopping and self.scheduler.running < self.settings.max_concurrency
                and self.scheduler.pending_count < MAX_PENDING)

    def _accept(self, claimed: Claimed) -> None:
        if claimed.invalid is not None:  # a FIFO, a link, a directory...: quarantined unread
            quarantine(self.queue, self.outbox, self.events, claimed, claimed.invalid)
            return
        try:
            message = parse_payload(claimed.data, self.settings.max_payload_bytes)
        except ValueError as exc:
            quarantine(self.queue, self.outbox, self.events, claimed, str(exc),
                       exc.apology() if isinstance(exc, UnstorableText) else None)
            return
        if self.scheduler.locks is not None and not self._admit(ordering_keys(message)):
            # replaced in incoming/ between its reading and its claim by a file of other keys,
            # held elsewhere: back in line (those keys are blocked for the rest of this pass)
            self.queue.release(claimed, 0.0)
            return
        self.events.emit("message.claimed", job_id=claimed.name, channel=message.channel, profile=message.profile,
                         conversation=message.conversation, attempt=claimed.attempts + 1)
        tracing.claimed(message, attempt=claimed.attempts + 1, job=claimed.name)
        self.scheduler.add(claimed.order, ordering_keys(message), _Job(claimed, message))
        if self.receipts is not None:
            self.receipts.claimed(claimed.order, message)

    def _start_ready(self) -> None:
        for keys, job in self.scheduler.ready():
            if self.receipts is not None:
                self.receipts.started(job.claimed.order)
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
        try:
            await self._run_job(job)
        except asyncio.CancelledError:
            if job.claimed.path.exists():
                self._requeue_uncounted(job.claimed)
            raise
        except self._storage_errors as exc:  # a read failed before it started (the answered index): back in line
            log.warning("cannot start %s (back in line): %s", job.claimed.name, exc)
            await self._durably(job, "return the message", functools.partial(self.queue.release, job.claimed,
                                                                             CLAIM_RETRY_S))
        except Exception as exc:  # the storage refused its bookkeeping: its failure, not the queue's
            log.error("%s: its bookkeeping failed", job.claimed.name, exc_info=exc)
            reason = f"the storage refused its bookkeeping: {type(exc).__name__}: {exc}".strip()
            await self._dead_letter(job, dead(job.message, made_safe(reason), job.claimed.attempts + 1))

    async def _run_job(self, job: _Job) -> None:
        claimed, message = job.claimed, job.message
        if self.answered.contains(message):
            await self._durably(job, "remove the answered file", lambda: self.queue.complete(claimed))
            self.events.emit("message.duplicate", job_id=claimed.name, channel=message.channel,
                             conversation=message.conversation, messageId=message.messageId)
            return
        try:
            data = await self._durably(job, "start the message", functools.partial(self.queue.start, claimed))
        except ValueError as exc:  # it cannot run here (an attachment that cannot be written back)
            await self._dead_letter(job, dead(message, str(exc), claimed.attempts + 1))
            return
        if data is None:
            return  # given back as a stopped handle's: another process runs it now
        if data != claimed.data:  # an edit folded into it since it was claimed
            claimed.data, message = data, parse_payload(data, self.settings.max_payload_bytes)
            job.message = message
        job.started = time.monotonic()
        finished = self._on_start(message) if self._on_start is not None else None
        try:
            outcome = await handled(self.handler, message, claimed.attempts, self.settings, job_id=claimed.name,
                                    wait_out=functools.partial(self._wait_out, job))
        finally:
            if finished is not None:
                finished()
        if isinstance(outcome, Done):
            await self._deliver(job, outcome)
        elif isinstance(outcome, Retry):
            await self._requeue(job, outcome)
        else:
            await self._dead_letter(job, outcome)

    async def _wait_out(self, job: _Job, exc: OSError, refusals: int) -> None:
        await self._storage_pause(job, f"process the message: {exc}", refusals)

    async def _durably(self, job: _Job, what: str, action: Callable[[], T]) -> T:
        """Runs a write into the queue, retrying it with backoff while the file system refuses it
        (disk full, folder not writable): the message stays claimed and keeps its keys, so nothing
        is lost and nothing overtakes it; each refusal is a `queue.error` event."""
        failures = 0
        while True:
            try:
                return action()
            except self._storage_errors as exc:
                failures += 1
                await self._storage_pause(job, f"{what}: {exc}", failures)

    async def _storage_pause(self, job: _Job, problem: str, failures: int) -> None:
        await storage_pause(self.events, self.settings, job.claimed.name, job.message, problem, failures)

    async def _deliver(self, job: _Job, done: Done) -> None:
        if self._store_answer is not None:
            if await self._durably(job, "store the answer", functools.partial(
                    self._store_answer, job.claimed, job.message, done.replies)):
                self.processed += 1
                done.announce(self.events, job.claimed.name, job.message, time.monotonic() - job.started)
            else:
                await self._keep_run_results(job, done)
            return
        for reply in done.replies:
            await self._durably(job, "write the reply", functools.partial(self.outbox.write, reply))
        await self._durably(job, "record the answer", functools.partial(self.answered.record, job.message))
        await self._durably(job, "remove the answered file", functools.partial(self.queue.complete, job.claimed))
        self.processed += 1
        done.announce(self.events, job.claimed.name, job.message, time.monotonic() - job.started)

    async def _keep_run_results(self, job: _Job, done: Done) -> None:
        """Another handle (whose host was taken for dead while only slow) stored its answer first: this one is
        dropped, but not a run's result or question the outbox lacks: the other answer may be the ack that
        promises it while the run handed it to this one's wait (`delivery: reply`). It goes out as a push."""
        for run_id, state, reply in done.run_replies():  # tried again whole: a write whose answer was lost is seen
            await self._durably(job, "push the run's result", functools.partial(push_unless_held, self.outbox,
                                                                                run_id, state, reply))

    async def _requeue(self, job: _Job, retry: Retry) -> None:
        retry.announce(self.events, job.claimed.name, job.message)
        await self._durably(job, "return the message to incoming",
                            functools.partial(self.queue.requeue, job.claimed, retry.error, retry.delay_s))
        self.scheduler.hold(job.claimed.order, ordering_keys(job.message))
        retry.requeued(self.events, job.claimed.name, job.message)

    async def _dead_letter(self, job: _Job, dead: Dead) -> None:
        job.claimed.errors.append(dead.error)  # the report keeps every error, this one too
        targets: list[Path] = []
        await self._durably(job, "move the message to failed/", lambda: targets.append(self.queue.dead_letter(
            job.claimed, dead.reason, attempts=dead.attempts, conversation=job.message.conversation)))
        dead.announce(self.events, job.claimed.name, job.message, where=f" moved to failed/{targets[0].name}",
                      file=targets[0].name)
        await self._durably(job, "write the apology", functools.partial(self.outbox.write, dead.apology))

    def _requeue_uncounted(self, claimed: Claimed) -> None:
        """Puts an interrupted message back for the next start, without counting an attempt."""
        try:
            self.queue.release(claimed, 0.0)
        except (OSError, KeyError) as exc:
            log.error("could not return %s to incoming (recovered at next start): %s", claimed.name, exc)

    async def stop(self, grace_s: float) -> None:
        """Stops intake, lets running messages finish for `grace_s`, then cancels and requeues the rest."""
        self._stopping = True
        self.wake()
        if self.receipts is not None:
            self.receipts.close()
        await finish_or_cancel(set(self._tasks), grace_s)
        for job in self.scheduler.drain_pending():
            self._requeue_uncounted(job.claimed)
        self.scheduler.release_idle()  # only now: no other process may claim a later message of a key first
