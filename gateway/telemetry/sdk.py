"""The OpenTelemetry SDK as Switchyard sets it up: one TracerProvider, its sampler and exporter, spans whose
attributes are filtered and masked, and the trace context read from and written into payloads.

Every opentelemetry import is made when a `Tracing` is built or used, never when this module is imported:
telemetry off imports none of it (gateway/telemetry/tracing.py installs a `Tracing` only when it is on)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from gateway.telemetry.carrier import STATE_KEY, derived_ids, fields_of

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span

    from gateway.config.telemetry import TelemetrySettings

Attributes = Mapping[str, Any]

CONTENT = "switchyard.content."
"""The prefix of attributes that hold what people or agents wrote: kept only with `telemetry.content: true`."""


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
    """The exporter `telemetry.exporter` names: the console, or OTLP/HTTP at `telemetry.endpoint`."""
    if settings.exporter == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=settings.endpoint.rstrip("/") + "/v1/traces")
