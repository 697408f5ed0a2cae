"""The spans of one message's path through the queue: its intake (the trace's root), the wait until an attempt
takes it (its queue time), its claim by a worker, and each attempt at it, all in the trace it carries."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from gateway.telemetry.carrier import P, Payload, queued_ms
from gateway.telemetry.sdk import CONTENT, Noted, Tracing

DAY_MS = 86_400_000


def intake(tracing: Tracing, payload: P) -> P:
    """Starts the message's trace (a child of the current span: a schedule's fire) and returns the payload
    carrying it; a payload that carries one already keeps it."""
    if isinstance((payload.model_extra or {}).get("traceparent"), str):
        return payload
    now_ns = time.time_ns()
    attributes = {"switchyard.channel": payload.channel, "switchyard.profile": payload.profile,
                  "switchyard.message_id": payload.messageId, CONTENT + "message": payload.message}
    span = tracing.tracer.start_span("message.intake", attributes=tracing.allowed(attributes), start_time=now_ns)
    try:
        return payload.model_copy(update=tracing.inject(span, now_ns // 1_000_000))
    finally:
        span.end()


@contextlib.contextmanager
def attempt(tracing: Tracing, message: Payload, attempt: int, job: str) -> Iterator[Noted]:
    """The span of one attempt at a message, in its carried trace; the first one also records the wait from
    intake to now (its queue time)."""
    extra = message.model_extra or {}
    parent = tracing.carried(message)
    now_ns = time.time_ns()
    since_ms = queued_ms(extra.get("tracestate"))
    if since_ms is None and 0 < now_ns // 1_000_000 - message.timestamp < DAY_MS:  # its sender's clock
        since_ms = message.timestamp
    base: dict[str, Any] = {"switchyard.job": job, "switchyard.attempt": attempt,
                            "switchyard.channel": message.channel}
    if attempt == 1 and parent is not None and since_ms is not None:
        waited = tracing.tracer.start_span("message.wait", context=parent, start_time=since_ms * 1_000_000,
                                           attributes={**base, "switchyard.queue_ms": now_ns // 1_000_000 - since_ms})
        waited.end(end_time=max(now_ns, since_ms * 1_000_000))
    with tracing.span("message.attempt", base, parent=parent, start_ns=now_ns) as span:
        yield span


def claimed(tracing: Tracing, message: Payload, attempt: int, job: str) -> None:
    """Marks the moment a worker took the message (a span of no length in its trace)."""
    parent = tracing.carried(message)
    span = tracing.tracer.start_span("message.claim", context=parent, attributes={
        "switchyard.job": job, "switchyard.attempt": attempt})
    span.end()
