"""The delivery loop of replies, written once for every backend; each backend supplies only storage.

The rules: a conversation's replies go out oldest first and only its head (its oldest unsent reply)
is ever sent, so a failing head keeps its place and holds the replies after it; conversations are
drained side by side, at most MAX_PARALLEL_DELIVERIES sends at a time. A failed send is retried
after the platform's retry-after or a jittered backoff; after `queue.max_attempts`, or at once when
the platform refuses it for good (PermanentError), the reply is dead with its reason. Each outcome is
an event: `outgoing.sent`, `outgoing.retry`, `outgoing.failed` (and `outgoing.skipped`, below).

Drafts of a streamed answer (`draft: true`, see orchestrator/agents/streaming.py) are previews, not answers: one
for a channel that cannot edit messages (no `edits_progress`) is not sent, nor one that a later reply of its
conversation supersedes (a newer draft of its key, or the final answer naming it as `streamKey`); both are
recorded as delivered with the reason (event `outgoing.skipped`). A channel's edits of one stream are
spaced by its `edit_interval_sec`, the final answer's included.

A backend's storage is a `Conversation` (gateway/outbox.py: where its head is found, how a retry waits) handing
out `Head`s (how a sent, retried or dead reply is recorded): files in `queue/outgoing/`
(gateway/runtime/dispatcher.py), rows of `switchyard_outbox` (gateway/backends/postgres/dispatcher.py,
rows.py); the postgres backend's delivery is given this loop (gateway.backends.runtime.RuntimeParts.send_loop).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from gateway.api import Channel, DeliveryError, PermanentError
from gateway.channelkit.attachments import AttachmentPolicy
from gateway.channelkit.backoff import delay as backoff_delay
from gateway.channelkit.delivery import SHARED_JOURNAL
from gateway.outbox import Conversation, Head, conversation_of
from gateway.runtime.uploads import send_with_files
from gateway.settings import QueueSettings
from gateway.telemetry import tracing
from gateway.telemetry.events import EventLog

log = logging.getLogger("switchyard.sending")

MAX_PARALLEL_DELIVERIES = 16
STREAM_MEMORY = 1000  # streams whose last edit time is kept; beyond it those idle for STREAM_IDLE_S go
STREAM_IDLE_S = 60.0


def edit_interval(channel: Channel, conversation: str) -> float:
    """The least time between two edits of one stream in this conversation: the channel's
    `edit_interval_for(conversation)` where it has one (limits that differ by chat), else its
    `edit_interval_sec`, else 0."""
    per_chat = getattr(channel, "edit_interval_for", None)
    value = per_chat(conversation) if callable(per_chat) else getattr(channel, "edit_interval_sec", 0.0)
    return float(value or 0.0)


def retry_delay(exc: Exception, attempts: int, settings: QueueSettings) -> float:
    """The platform's retry-after when it gave one, else jittered exponential backoff."""
    if isinstance(exc, DeliveryError) and exc.retry_after is not None:
        return float(exc.retry_after)
    return backoff_delay(attempts, settings.backoff_initial_ms, settings.backoff_max_ms, jitter=(0.8, 1.2)) / 1000


def send_attributes(_: Sender, head: Head) -> dict[str, object]:
    """The attributes of one delivery attempt's span (gateway/telemetry/tracing.py)."""
    payload = head.payload
    return {"switchyard.file": head.name, "switchyard.channel": payload.channel, "switchyard.profile": payload.profile,
            "switchyard.attempt": head.attempts + 1, "switchyard.files": len(payload.files)}


class Sender:
    """Sends heads through their channels, one attempt at a time, and records what became of each."""

    def __init__(self, attachments: AttachmentPolicy, events: EventLog, settings: QueueSettings):
        self.attachments = attachments
        self.events = events
        self.settings = settings
        self.slots = asyncio.Semaphore(MAX_PARALLEL_DELIVERIES)
        self._edited: dict[tuple[str, str, str, str], float] = {}  # a stream's last edit, by channel and key

    async def drain(self, conversation: Conversation, stopping: Callable[[], bool]) -> None:
        """Delivers a conversation's replies, head first, until none is due or `stopping()`."""
        while not stopping():
            try:
                head = await conversation.head()
                if head is None:
                    return
                if await self._passed_over(head) or (await self._spaced(head) and await self._passed_over(head)):
                    continue
                async with self.slots:
                    delay = await self.send(head)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if await conversation.failed(exc):
                    continue
                return
            if delay is not None and not await conversation.wait(delay):
                return

    async def _passed_over(self, head: Head) -> bool:
        """Records a draft that is not to be sent as delivered (see the module's docstring); False for any
        other reply."""
        payload = head.payload
        if not payload.draft:
            return False
        if not getattr(head.channel, "edits_progress", False):
            reason = "a draft: this channel cannot edit a message, it gets the final answer only"
        elif await head.superseded():
            reason = "a draft superseded by a later one or by the final answer"
        else:
            return False
        await head.sent()
        self.events.emit("outgoing.skipped", file=head.name, channel=payload.channel, profile=payload.profile,
                         conversation=payload.conversationId, messageId=payload.messageId, reason=reason)
        return True

    def _stream_of(self, head: Head) -> tuple[str, str, str, str] | None:
        """The stream a draft or a final answer edits, with its channel and conversation."""
        payload = head.payload
        key = payload.progress_key if payload.draft else payload.stream_key
        if key is None or not getattr(head.channel, "edits_progress", False):
            return None
        return payload.channel, payload.profile, conversation_of(payload), key

    async def _spaced(self, head: Head) -> bool:
        """Waits until the channel's `edit_interval_sec` has passed since the last edit of this head's
        stream; True when it waited."""
        stream = self._stream_of(head)
        last = self._edited.get(stream) if stream is not None else None
        interval = edit_interval(head.channel, conversation_of(head.payload))
        if last is None or (wait := last + interval - time.monotonic()) <= 0:
            return False
        await asyncio.sleep(wait)
        return True

    def _edited_now(self, head: Head) -> None:
        """Notes when a stream was last edited (a draft sent); a final answer ends it."""
        stream = self._stream_of(head)
        if stream is None:
            return
        if not head.payload.draft:
            self._edited.pop(stream, None)
            return
        now = time.monotonic()
        self._edited[stream] = now
        if len(self._edited) > STREAM_MEMORY:
            self._edited = {key: at for key, at in self._edited.items() if now - at < STREAM_IDLE_S}

    @tracing.traced("delivery.send", send_attributes, carrier=lambda _, head: head.payload)
    async def send(self, head: Head) -> float | None:
        """Sends the head once and records the outcome; the delay before its next attempt when it is
        retried, None when it was sent or is dead."""
        payload = head.payload
        started = time.perf_counter()
        token = SHARED_JOURNAL.set(head.journal)
        try:
            record = await (send_with_files(head.channel, payload, self.attachments, self.events) if payload.files
                            else head.channel.send(payload))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not head.counts(exc):
                raise
            return await self._failed(head, exc)
        finally:
            SHARED_JOURNAL.reset(token)
        self._edited_now(head)
        await head.sent()
        self.events.emit("outgoing.sent", file=head.name, channel=payload.channel, profile=payload.profile,
                         conversation=payload.conversationId, messageId=payload.messageId,
                         platform_ids=record.platform_ids if record else None,
                         duration_ms=round((time.perf_counter() - started) * 1000, 2))
        return None

    async def _failed(self, head: Head, exc: Exception) -> float | None:
        attempts = head.attempts + 1
        if isinstance(exc, PermanentError):  # the platform refused it for good (blocked, gone, not a member)
            await self.give_up(head, f"the platform refused it: {exc}", attempts)
            return None
        if attempts >= self.settings.max_attempts:
            await self.give_up(head, f"delivery failed {attempts} time(s): {exc}", attempts)
            return None
        delay = retry_delay(exc, attempts, self.settings)
        tracing.note(**{"switchyard.retry_in_s": delay, "switchyard.rate_limited": isinstance(exc, DeliveryError)
                        and exc.retry_after is not None, "switchyard.error": str(exc)[:500]})
        await head.retry(attempts, str(exc), delay)
        payload = head.payload
        self.events.emit("outgoing.retry", file=head.name, channel=payload.channel, profile=payload.profile,
                         conversation=payload.conversationId, reason=str(exc), attempt=attempts,
                         backoff_ms=int(delay * 1000),
                         rate_limited=isinstance(exc, DeliveryError) and exc.retry_after is not None)
        return delay

    async def give_up(self, head: Head, reason: str, attempts: int) -> None:
        """Records the head as dead and says so."""
        reason = self.events.redact(reason)  # a platform's error may quote a token
        await head.dead(reason, attempts)
        self.undeliverable(head.name, reason, attempts)

    def undeliverable(self, name: str, reason: str, attempts: int) -> None:
        """Logs and emits `outgoing.failed` for a reply its storage now keeps as dead."""
        log.error("undeliverable reply %s is dead: %s", name, reason)
        self.events.emit("outgoing.failed", file=name, reason=reason, attempts=attempts)

