"""gateway/telemetry/tracing.py as its call sites see it: a pass-through while off, spans and ids while on, log
lines and events naming the trace they were written in, content kept out unless asked for."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from gateway.settings import TelemetrySettings  # noqa: E402
from gateway.telemetry import tracing  # noqa: E402
from gateway.telemetry.events import EventLog, read_events  # noqa: E402
from gateway.telemetry.logs import OneLineFormatter  # noqa: E402
from gateway.testing import make_incoming  # noqa: E402


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    tracing.install(TelemetrySettings(), exporter=memory)
    yield memory
    tracing.uninstall()


@tracing.traced("doubled", lambda value: {"switchyard.value": value}, lambda result: {"switchyard.result": result})
def _doubled(value: int) -> int:
    return value * 2


def test_while_off_a_call_site_is_a_pass_through_and_names_no_trace() -> None:
    assert tracing.active() is None
    assert _doubled(21) == 42
    with tracing.span("anything", **{"switchyard.x": 1}) as span:
        span.note(**{"switchyard.y": 2})
    assert tracing.current_ids() is None and tracing.current_carrier() == {}
    message = make_incoming("hi")
    assert tracing.intake(message) is message


def test_a_traced_call_is_a_span_with_its_arguments_and_result(spans) -> None:
    assert _doubled(21) == 42
    [span] = spans.get_finished_spans()
    assert span.name == "doubled" and span.attributes == {"switchyard.value": 21, "switchyard.result": 42}


def test_intake_stamps_w3c_trace_context_that_an_attempt_continues(spans) -> None:
    stamped = tracing.intake(make_incoming("hello"))
    extra = stamped.model_extra or {}
    assert extra["traceparent"].startswith("00-") and extra["tracestate"].startswith("switchyard=")
    assert tracing.intake(stamped) is stamped  # a carried trace is kept, never restarted
    trace_id = extra["traceparent"].split("-")[1]
    assert tracing.trace_id_of(stamped.model_dump()) == trace_id
    installed = tracing.active()
    assert installed is not None
    with installed.attempt(stamped, 1, "job"):
        assert (tracing.current_ids() or ("",))[0] == trace_id
    assert {s.name for s in spans.get_finished_spans()} == {"message.intake", "message.wait", "message.attempt"}


def test_log_lines_and_events_name_the_trace_they_are_written_in(spans, tmp_path: Path) -> None:
    text, json_lines = OneLineFormatter("text"), OneLineFormatter("json")
    record = logging.makeLogRecord({"msg": "handled", "levelno": logging.INFO, "levelname": "INFO"})
    events = EventLog(tmp_path / "events.jsonl")
    assert "trace_id" not in text.format(record)
    with tracing.span("message.attempt"):
        trace_id = (tracing.current_ids() or ("",))[0]
        assert text.format(record).endswith(f" trace_id={trace_id}")
        assert f'"trace_id": "{trace_id}"' in json_lines.format(record)
        events.emit("job.succeeded", job_id="j1")
    events.emit("gateway.started")
    events.close()
    logged = read_events(tmp_path / "events.jsonl")
    assert logged[0]["trace_id"] == trace_id and "trace_id" not in logged[1]


def test_content_attributes_are_dropped_unless_telemetry_content_is_on(spans) -> None:
    with tracing.span("agent.turn", **{"switchyard.provider": "claude", "switchyard.content.prompt": "a secret"}):
        pass
    [span] = spans.get_finished_spans()
    assert dict(span.attributes or {}) == {"switchyard.provider": "claude"}
