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
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span

    from gateway.settings import TelemetrySettings

log = logging.getLogger("switchyard.tracing")

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])
Attributes = Mapping[str, Any]


class Payload(Protocol):
    """An incoming payload as traces read it (gateway.models.IncomingPayload, which imports this module)."""

    channel: str
    messageId: str  # noqa: N815 - the payload's own field name
    message: str
    timestamp: int

    @property
    def model_extra(self) -> dict[str, Any] | None: ...

    @property
    def profile(self) -> str: ...

    def model_copy(self: P, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> P: ...


P = TypeVar("P", bound=Payload)

CONTENT = "switchyard.content."
"""The prefix of attributes that hold what people or agents wrote: kept only with `telemetry.content: true`."""
DAY_MS = 86_400_000
STATE_KEY = "switchyard"
"""Our entry in `tracestate`: the message's intake time (epoch ms)."""


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


class Noted:
    """A live span as call sites see it: `note(**attributes)` adds attributes (content ones filtered)."""

    def __init__(self, span: Span, tracing: Tracing):
        self.span = span
        self._tracing = tracing

    def note(self, **attributes: Any) -> None:
        """Adds attributes to the span (`switchyard.content.*` only with `telemetry.content: true`)."""
        self.span.set_attributes(self._tracing.allowed(attributes))


class Tracing:
    """The process's tracer: an SDK TracerProvider with one exporter (OTLP/HTTP, the console, or a test's)."""

    def __init__(self, settings: TelemetrySettings, *, role: str = "run", exporter: SpanExporter | None = None,
                 redact: Callable[[str], str] | None = None):
        from opentelemetry.propagators.textmap import DefaultGetter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.settings = settings
        self._redact = redact or (lambda text: text)  # the gateway's secrets masked, as in events and logs
        resource = Resource.create({"service.name": settings.service_name, "switchyard.role": role})
        self.provider = TracerProvider(resource=resource, sampler=ParentBased(TraceIdRatioBased(settings.sample_ratio)))
        if exporter is not None:  # a test's in-memory exporter: each span as it ends
            self.provider.add_span_processor(SimpleSpanProcessor(exporter))
        else:
            self.provider.add_span_processor(BatchSpanProcessor(_exporter(settings)))
        self.tracer = self.provider.get_tracer("switchyard")
        self._propagator = TraceContextTextMapPropagator()
        self._getter = DefaultGetter()

    def allowed(self, attributes: Attributes) -> dict[str, Any]:
        """The attributes a span may hold: no None, content only when `telemetry.content` allows it, every
        secret masked."""
        return {key: self._redact(value) if isinstance(value, str) else value for key, value in attributes.items()
                if value is not None and (self.settings.content or not key.startswith(CONTENT))}

    @contextlib.contextmanager
    def span(self, name: str, attributes: Attributes, parent: Context | None = None,
             start_ns: int | None = None) -> Iterator[Noted]:
        """A span made current for the block, a child of the current one (or of `parent`). An exception
        marks it failed with its type and text, secrets masked (no traceback: it may quote what was written)."""
        with self.tracer.start_as_current_span(name, context=parent, attributes=self.allowed(attributes),
                                               start_time=start_ns, record_exception=False,
                                               set_status_on_exception=False) as span:
            try:
                yield Noted(span, self)
            except BaseException as exc:
                from opentelemetry.trace import Status, StatusCode

                why = self._redact(f"{type(exc).__name__}: {exc}")[:500]
                span.set_status(Status(StatusCode.ERROR, why))
                raise

    def carried(self, carrier: Any) -> Context | None:
        """The context a payload (a model, or its dict) carries in `traceparent`/`tracestate`; for one that
        carries none (a file another program dropped), the trace its identity names (`derived_ids`), so its
        claim, every attempt and its run on any host still make one trace. None for neither."""
        from opentelemetry import trace

        fields = fields_of(carrier)
        if isinstance(fields.get("traceparent"), str):
            context = self._propagator.extract({key: fields[key] for key in ("traceparent", "tracestate")
                                                if isinstance(fields.get(key), str)})
            if trace.get_current_span(context).get_span_context().is_valid:
                return context
        ids = derived_ids(fields)
        if ids is None:
            return None
        trace_id, span_id = ids
        keep = (trace_id & (2**64 - 1)) < round(self.settings.sample_ratio * 2**64)  # as TraceIdRatioBased decides
        parent = trace.SpanContext(trace_id, span_id, is_remote=True,
                                   trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED if keep else 0))
        return trace.set_span_in_context(trace.NonRecordingSpan(parent))

    def inject(self, span: Span, queued_ms: int | None = None) -> dict[str, str]:
        """`traceparent` (and `tracestate` with the intake time) naming `span` as the parent."""
        from opentelemetry import trace

        fields: dict[str, str] = {}
        self._propagator.inject(fields, trace.set_span_in_context(span))
        if queued_ms is not None:
            fields["tracestate"] = f"{STATE_KEY}={queued_ms}"
        return fields

    def intake(self, payload: P) -> P:
        """Starts the message's trace (a child of the current span: a schedule's fire) and returns the
        payload carrying it; a payload that carries one already keeps it."""
        if isinstance((payload.model_extra or {}).get("traceparent"), str):
            return payload
        now_ns = time.time_ns()
        attributes = {"switchyard.channel": payload.channel, "switchyard.profile": payload.profile,
                      "switchyard.message_id": payload.messageId, CONTENT + "message": payload.message}
        span = self.tracer.start_span("message.intake", attributes=self.allowed(attributes), start_time=now_ns)
        try:
            return payload.model_copy(update=self.inject(span, now_ns // 1_000_000))
        finally:
            span.end()

    @contextlib.contextmanager
    def attempt(self, message: Payload, attempt: int, job: str) -> Iterator[Noted]:
        """The span of one attempt at a message, in its carried trace; the first one also records the wait
        from intake to now (its queue time)."""
        extra = message.model_extra or {}
        parent = self.carried(message)
        now_ns = time.time_ns()
        queued_ms = _queued_ms(extra.get("tracestate"))
        if queued_ms is None and 0 < now_ns // 1_000_000 - message.timestamp < DAY_MS:  # its sender's clock
            queued_ms = message.timestamp
        base: dict[str, Any] = {"switchyard.job": job, "switchyard.attempt": attempt,
                                "switchyard.channel": message.channel}
        if attempt == 1 and parent is not None and queued_ms is not None:
            waited = self.tracer.start_span("message.wait", context=parent, start_time=queued_ms * 1_000_000,
                                            attributes={**base, "switchyard.queue_ms": now_ns // 1_000_000 - queued_ms})
            waited.end(end_time=max(now_ns, queued_ms * 1_000_000))
        with self.span("message.attempt", base, parent=parent, start_ns=now_ns) as span:
            yield span

    def claimed(self, message: Payload, attempt: int, job: str) -> None:
        """Marks the moment a worker took the message (a span of no length in its trace)."""
        parent = self.carried(message)
        span = self.tracer.start_span("message.claim", context=parent, attributes={
            "switchyard.job": job, "switchyard.attempt": attempt})
        span.end()

    def current_ids(self) -> tuple[str, str] | None:
        """(trace id, span id) of the current span, as hex; None outside any span."""
        from opentelemetry import trace

        context = trace.get_current_span().get_span_context()
        return (f"{context.trace_id:032x}", f"{context.span_id:016x}") if context.is_valid else None

    def current_carrier(self) -> dict[str, str]:
        """`traceparent` of the current span (for a payload written now); empty outside any span."""
        from opentelemetry import trace

        span = trace.get_current_span()
        return self.inject(span) if span.get_span_context().is_valid else {}

    def shutdown(self) -> None:
        """Sends what is still buffered, then stops the exporter."""
        self.provider.shutdown()


def _exporter(settings: TelemetrySettings) -> SpanExporter:
    if settings.exporter == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=settings.endpoint.rstrip("/") + "/v1/traces")


def fields_of(carrier: Any) -> dict[str, Any]:
    """What a payload carries for traces: its extra keys (`traceparent`, `tracestate`) and its identity."""
    if carrier is None:
        return {}
    if isinstance(carrier, Mapping):
        return {**carrier, "profile": carrier.get("channelProfileId") or carrier.get("channel")}
    return {**(carrier.model_extra or {}), "channel": carrier.channel, "profile": carrier.profile,
            "messageId": carrier.messageId}


def derived_ids(fields: Mapping[str, Any]) -> tuple[int, int] | None:
    """(trace id, parent span id) named by a message's identity (channel, profile, messageId), for a message that
    carries no trace context; None without an identity."""
    if not isinstance(fields.get("channel"), str) or not isinstance(fields.get("messageId"), str):
        return None
    digest = hashlib.sha256(f"{fields['channel']}/{fields.get('profile')}/{fields['messageId']}".encode()).digest()
    return int.from_bytes(digest[:16], "big") or 1, int.from_bytes(digest[16:24], "big") or 1


def _queued_ms(tracestate: Any) -> int | None:
    if not isinstance(tracestate, str):
        return None
    for entry in tracestate.split(","):
        key, _, value = entry.strip().partition("=")
        if key == STATE_KEY and value.isdigit():
            return int(value)
    return None


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
    return payload if tracing is None else tracing.intake(payload)


def claimed(message: Payload, *, attempt: int, job: str) -> None:
    """Marks the claim of a message by a worker (see Tracing.claimed)."""
    tracing = _installed
    if tracing is not None:
        tracing.claimed(message, attempt, job)


async def attempt(message: Payload, work: Awaitable[T], *, attempt: int, job: str) -> T:
    """Awaits `work` (the handler on `message`) as the message's attempt number `attempt`."""
    tracing = _installed
    if tracing is None:
        return await work
    with tracing.attempt(message, attempt, job):
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
