"""What became of a handled message: done, retried after a backoff, or dead with an apology.

The rule is written once here and every backend only stores what it decides: the Worker
(gateway/runtime/worker.py, on every backend's queue) calls `handled` (or `failed`, `dead`) and then writes
the outcome to its queue's storage, announcing it with the outcome's events when that storage allows
(before a retry is stored, and after it; once a dead letter is stored).
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gateway.api import Handler, Outbox, PermanentError
from gateway.models import IncomingPayload, OutgoingPayload
from gateway.payloads import APOLOGY, backoff_seconds
from gateway.settings import QueueSettings
from gateway.telemetry import tracing
from gateway.telemetry.events import EventLog, now_ms

log = logging.getLogger("switchyard.worker")

# The file system refuses writes for reasons outside the message: a backend may wait these out.
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})


def _fields(job_id: str, message: IncomingPayload) -> dict[str, Any]:
    return {"job_id": job_id, "channel": message.channel, "profile": message.profile,
            "conversation": message.conversation}


@dataclass(frozen=True)
class Done:
    """The handler answered: its replies are stored with the answer, in order."""

    replies: list[OutgoingPayload]

    def announce(self, events: EventLog, job_id: str, message: IncomingPayload, duration_s: float) -> None:
        """Emits `job.succeeded` once the replies and the answer are stored."""
        events.emit("job.succeeded", job_id=job_id, state="done", kind="message", channel=message.channel,
                    conversation=message.conversation, replies=len(self.replies),
                    duration_ms=round(duration_s * 1000, 2))

    def run_replies(self) -> list[tuple[str, str, OutgoingPayload]]:
        """(run id, run state, reply) of each reply carrying a run's result or question (`runState`), which
        must reach the conversation even when another handle's answer to the message was stored instead."""
        found = []
        for reply in self.replies:
            state = (reply.model_extra or {}).get("runState")
            if reply.workflowRunId is not None and isinstance(state, str):
                found.append((reply.workflowRunId, state, reply))
        return found


def push_unless_held(outbox: Outbox, run_id: str, state: str, reply: OutgoingPayload) -> None:
    """Writes `reply`, which carries run `run_id` in `state`, unless the outbox holds such a reply already."""
    if not outbox.holds_result(run_id, state, channel=reply.channel, message_id=reply.messageId):
        log.warning("a message was answered elsewhere first; the result of run %s it carried is pushed", run_id)
        outbox.write(reply)


@dataclass(frozen=True)
class Retry:
    """The handler failed and attempts are left: the message waits `delay_s` and is tried again."""

    error: str  # this attempt's error, kept with the message's others
    attempts: int  # failed attempts counted so far, this one included
    delay_s: float

    def announce(self, events: EventLog, job_id: str, message: IncomingPayload) -> None:
        """Emits `job.failed.retryable`, before the failure is stored."""
        events.emit("job.failed.retryable", state="failed", kind="message", reason=self.error,
                    failure_reason=self.error, **_fields(job_id, message), retries=self.attempts)

    def requeued(self, events: EventLog, job_id: str, message: IncomingPayload) -> None:
        """Emits `job.requeued`, once the message is back in line."""
        events.emit("job.requeued", state="queued", kind="message", backoff_ms=int(self.delay_s * 1000),
                    **_fields(job_id, message), retries=self.attempts)


@dataclass(frozen=True)
class Dead:
    """The message is given up: kept as a dead letter with `reason`, its sender told by `apology`."""

    reason: str
    error: str  # this attempt's error, kept with the message's others
    attempts: int
    apology: OutgoingPayload

    def announce(self, events: EventLog, job_id: str, message: IncomingPayload, *, where: str = "",
                 **extra: Any) -> None:
        """Logs the dead letter and emits `job.failed.final`, once it is stored (`where`: e.g. its file)."""
        log.error("dead letter: %s (%s, conversation %s)%s: %s", job_id, message.channel, message.conversation,
                  where, self.reason)
        events.emit("job.failed.final", job_id=job_id, state="failed_final", kind="message",
                    channel=message.channel, profile=message.profile, conversation=message.conversation,
                    reason=self.reason, failure_reason=self.reason, attempts=self.attempts, **extra)


Outcome = Done | Retry | Dead


def apology(message: IncomingPayload, attempts: int, text: str | None = None) -> OutgoingPayload:
    """The reply telling the sender their message was given up: `text`, else the generic apology."""
    preview = message.message[:60] + ("…" if len(message.message) > 60 else "")
    text = text or APOLOGY.format(preview=preview, attempts=attempts)
    return OutgoingPayload.reply_to(message, text, agent="switchyard", timestamp=now_ms())


def dead(message: IncomingPayload, reason: str, attempts: int, *, reply: str | None = None) -> Dead:
    """The message dead at its `attempts`-th attempt for `reason` (`reply`: what its sender is told)."""
    return Dead(reason, reason, attempts, apology(message, attempts, reply))


def failed(message: IncomingPayload, exc: Exception, attempts: int, settings: QueueSettings) -> Retry | Dead:
    """The outcome of a handler's failure after `attempts` earlier failed attempts: a PermanentError is dead
    at once; any other failure is retried with backoff until `queue.max_attempts`, then dead."""
    if isinstance(exc, PermanentError):
        return dead(message, str(exc), attempts + 1, reply=exc.reply)
    error = f"{type(exc).__name__}: {exc}"
    attempts += 1
    if attempts >= settings.max_attempts:  # a failure that says what its sender should hear (`reply`) says it
        said = getattr(exc, "reply", None)
        return Dead(f"failed {attempts} time(s); last error: {error}", error, attempts,
                    apology(message, attempts, said if isinstance(said, str) and said else None))
    return Retry(error, attempts, backoff_seconds(attempts, settings))


async def handled(handler: Handler, message: IncomingPayload, attempts: int, settings: QueueSettings, *,
                  job_id: str, wait_out: Callable[[OSError, int], Awaitable[None]] | None = None) -> Outcome:
    """Runs the handler on a message that failed `attempts` times before and returns what became of it.

    With `wait_out`, a refusal of the file system (STORAGE_ERRNOS: disk full, read-only) is not the
    message's failure: `wait_out(error, refusals so far)` waits, then the handler is called again."""
    refusals = 0
    while True:
        try:
            return Done(await tracing.attempt(message, handler.handle(message), attempt=attempts + 1, job=job_id))
        except OSError as exc:
            if wait_out is None or exc.errno not in STORAGE_ERRNOS:
                return _failed(message, exc, attempts, settings, job_id)
            refusals += 1
            await wait_out(exc, refusals)
        except Exception as exc:
            return _failed(message, exc, attempts, settings, job_id)


def _failed(message: IncomingPayload, exc: Exception, attempts: int, settings: QueueSettings,
            job_id: str) -> Retry | Dead:
    if not isinstance(exc, PermanentError):
        log.warning("processing %s failed: %s", job_id, exc, exc_info=log.isEnabledFor(logging.DEBUG))
    return failed(message, exc, attempts, settings)
