"""OpenTelemetry traces of one message's whole path (off unless `telemetry:` is set in settings.yaml).

One trace per incoming message: `message.intake` (its root, when a channel or a schedule's fire hands it to
the queue), `message.wait` (from intake to the attempt that takes it: its queue time, the wait for its key
included), `message.claim` and `message.attempt` (one per attempt, so a retried message keeps its trace), and
inside an attempt the selector's turn, the agent turns, the approvals waited on; a run started by the message
(`workflow.run`, its `run.step`s) and each delivery of its replies (`delivery.send`, `delivery.part`) join
the same trace through the context each carries.

The context crosses processes and hosts with the message, as W3C trace context in the payload itself:
`traceparent`, and `tracestate` holding `switchyard=<intake time, epoch ms>` (the wait's start). Spec 002
payloads keep unknown keys (gateway/models.py), so these two travel in the spool file, in the PostgreSQL row's
payload, in a run's state (`message`) and in each reply; no sidecar is needed. A payload without them (a file
another program dropped, `switchyard send`) is in the trace its identity names (a hash of its channel, profile
and messageId: `derived_ids`), so its claim, its attempts and its run are one trace on every host too; its wait
starts at its own `timestamp`.

When telemetry is off nothing of opentelemetry is imported and every call here is one test of the process's
installed `Tracing` (None): call sites stay one line and cost about nothing. When it is on, the Gateway (the
composition root) installs one `Tracing` for its process: like logging's handlers and OpenTelemetry's own
context, a tracer is process-wide, so no constructor has to carry it. Attributes never hold a prompt, an
answer or a message's text unless `telemetry.content: true`: any attribute named `switchyard.content.*` is
dropped before it reaches a span otherwise.

This module is the off path and the call sites; the SDK's set-up is gateway/telemetry/sdk.py, the context a
payload carries gateway/telemetry/carrier.py, the spans of a message's path gateway/telemetry/messagespans.py.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from gateway.telemetry import messagespans
from gateway.telemetry.carrier import P, Payload, derived_ids, fields_of
from gateway.telemetry.sdk import CONTENT, Attributes, Noted, Tracing

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

    from gateway.config.telemetry import TelemetrySettings

__all__ = [
    "CONTENT", "NO_SPAN", "Noted", "Payload", "Tracing", "active", "attempt", "carried_span", "claimed",
    "current_carrier", "current_ids", "install", "intake", "note", "span", "trace_id_of", "traced", "uninstall",
]

log = logging.getLogger("switchyard.tracing")

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


class _NoSpan:
    """What a span call gives while telemetry is off: a context manager that notes nothing."""

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def note(self, **_: Any) -> None:
        """Sets attributes on the span (none here)."""


NO_SPAN = _NoSpan()
_installed: Tracing | None = None


# --- the process's tracer ------------------------------------------------------------------


def install(settings: TelemetrySettings | None, *, role: str = "run", exporter: SpanExporter | None = None,
            redact: Callable[[str], str] | None = None) -> Tracing | None:
    """Installs this process's tracer from `telemetry:` (None: off, nothing imported); returns it. A missing
    `otel` extra is logged and leaves telemetry off: traces are never worth a gateway that does not start."""
    global _installed
    uninstall()
    if settings is None:
        return None
    try:
        _installed = Tracing(settings, role=role, exporter=exporter, redact=redact)
    except ImportError as exc:
        log.error("telemetry is set but OpenTelemetry is not installed (pip install -e '.[otel]'): %s", exc)
        return None
    return _installed


def uninstall() -> None:
    """Flushes and removes this process's tracer (telemetry off from now on)."""
    global _installed
    tracing, _installed = _installed, None
    if tracing is not None:
        tracing.shutdown()


def active() -> Tracing | None:
    """This process's tracer; None while telemetry is off."""
    return _installed


# --- call sites: each one line, about free while telemetry is off ----------------------------


def span(name: str, **attributes: Any) -> contextlib.AbstractContextManager[Noted | _NoSpan]:
    """A span for a `with` block, a child of the current one."""
    tracing = _installed
    return NO_SPAN if tracing is None else tracing.span(name, attributes)


def carried_span(name: str, carrier: Any,
                 **attributes: Any) -> contextlib.AbstractContextManager[Noted | _NoSpan]:
    """A span in the trace a payload carries (`carrier`: its fields), for work done away from the message's
    own task (a run's execution, a reply's delivery)."""
    tracing = _installed
    return NO_SPAN if tracing is None else tracing.span(name, attributes, parent=tracing.carried(carrier))


def intake(payload: P) -> P:
    """The payload carrying its new trace (see Tracing.intake); unchanged while telemetry is off."""
    tracing = _installed
    return payload if tracing is None else messagespans.intake(tracing, payload)


def claimed(message: Payload, *, attempt: int, job: str) -> None:
    """Marks the claim of a message by a worker (see Tracing.claimed)."""
    tracing = _installed
    if tracing is not None:
        messagespans.claimed(tracing, message, attempt, job)


async def attempt(message: Payload, work: Awaitable[T], *, attempt: int, job: str) -> T:
    """Awaits `work` (the handler on `message`) as the message's attempt number `attempt`."""
    tracing = _installed
    if tracing is None:
        return await work
    with messagespans.attempt(tracing, message, attempt, job):
        return await work


def note(**attributes: Any) -> None:
    """Adds attributes to the current span (e.g. a delivery's retry and its 429 wait)."""
    tracing = _installed
    if tracing is not None:
        from opentelemetry import trace

        trace.get_current_span().set_attributes(tracing.allowed(attributes))


def current_ids() -> tuple[str, str] | None:
    """(trace id, span id) of the current span; None when telemetry is off or no span is current."""
    tracing = _installed
    return None if tracing is None else tracing.current_ids()


def current_carrier() -> dict[str, str]:
    """The `traceparent` a payload written now carries (a reply); empty when off or outside any span."""
    tracing = _installed
    return {} if tracing is None else tracing.current_carrier()


def trace_id_of(carrier: Mapping[str, Any] | None) -> str | None:
    """The trace id of a payload (its dict): the one its `traceparent` names, else (telemetry on) the one its
    identity names; None when it has none."""
    parent = (carrier or {}).get("traceparent")
    if isinstance(parent, str):
        parts = parent.split("-")
        return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else None
    ids = derived_ids(fields_of(carrier)) if _installed is not None else None
    return None if ids is None else f"{ids[0]:032x}"


def traced(name: str, attributes: Callable[..., Attributes] | None = None,
           result: Callable[[Any], Attributes] | None = None,
           carrier: Callable[..., Any] | None = None) -> Callable[[F], F]:
    """Decorates a function (sync or async) so each call is a span: `attributes(*args, **kwargs)` at its start,
    `result(returned)` at its end, `carrier(*args, **kwargs)`: a payload whose trace it joins (else the
    current span's). A raised exception marks the span failed and goes on."""

    def decorate(function: F) -> F:
        def opened(tracing: Tracing, args: Any, kwargs: Any) -> contextlib.AbstractContextManager[Noted]:
            named = _described(name, attributes, *args, **kwargs)
            parent = tracing.carried(_described(name, carrier, *args, **kwargs)) if carrier is not None else None
            return tracing.span(name, named, parent=parent)

        if inspect.iscoroutinefunction(function):
            @functools.wraps(function)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                tracing = _installed
                if tracing is None:
                    return await function(*args, **kwargs)
                with opened(tracing, args, kwargs) as span:
                    returned = await function(*args, **kwargs)
                    if result is not None:
                        span.note(**_described(name, result, returned))
                    return returned

            return run_async  # type: ignore[return-value]

        @functools.wraps(function)
        def run(*args: Any, **kwargs: Any) -> Any:
            tracing = _installed
            if tracing is None:
                return function(*args, **kwargs)
            with opened(tracing, args, kwargs) as span:
                returned = function(*args, **kwargs)
                if result is not None:
                    span.note(**_described(name, result, returned))
                return returned

        return run  # type: ignore[return-value]

    return decorate


def _described(name: str, describe: Callable[..., Any] | None, *args: Any, **kwargs: Any) -> Any:
    """What `describe` says of a call (its attributes, its carrier); {} when it fails: a span's description
    never fails the work it describes."""
    if describe is None:
        return {}
    try:
        return describe(*args, **kwargs)
    except Exception:
        log.debug("cannot describe the span %s", name, exc_info=True)
        return {}
