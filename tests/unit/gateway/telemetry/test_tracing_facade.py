"""gateway/telemetry/tracing.py as its call sites see it: a pass-through while off, spans and ids while on, log
lines and events naming the trace they were written in, content kept out unless asked for."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from gateway.settings import TelemetrySettings  # noqa: E402
from gateway.telemetry import messagespans, tracing  # noqa: E402
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
    with messagespans.attempt(installed, stamped, 1, "job"):
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


async def test_a_scheduled_prompts_trace_starts_at_its_fire(spans, tmp_path: Path) -> None:
    from datetime import timedelta

    from orchestrator.schedules.records import MemoryScheduleRecords
    from tests.unit.orchestrator.schedules.test_schedules import T0, Host, every

    host = Host(MemoryScheduleRecords(), {"default/digest": every(60)}, EventLog(tmp_path / "events.jsonl"))
    enqueue = host.scheduler.enqueue

    async def through_the_sink(message: Any) -> Any:  # as the Gateway's sink does
        return await enqueue(tracing.intake(message))

    host.scheduler.enqueue = through_the_sink
    await host.at(T0)
    await host.at(T0 + timedelta(seconds=60))
    named = {span.name: span for span in spans.get_finished_spans()}
    fire, intake = named["schedule.fire"], named["message.intake"]
    assert fire.parent is None and intake.parent is not None and intake.parent.span_id == fire.context.span_id
    assert fire.attributes == {"switchyard.schedule": "default/digest"}
    carried = (host.enqueued[0].model_extra or {})["traceparent"]
    assert carried.split("-")[1] == f"{fire.context.trace_id:032x}"  # the message goes on in the fire's trace


async def test_each_part_of_a_reply_is_a_span_of_its_delivery(spans, tmp_path: Path) -> None:
    from gateway.channelkit.delivery import DeliveryJournal, deliver_parts, reply_parts
    from gateway.home import Home
    from gateway.models import OutgoingPayload

    reply = OutgoingPayload.reply_to(make_incoming("hi"), "word " * 14, agent="a", timestamp=1)
    parts = reply_parts(reply, 30)
    sent: list[int] = []

    async def send_part(part: Any) -> str:
        sent.append(part.index)
        return f"p{part.index}"

    with tracing.span("delivery.send"):
        await deliver_parts(reply, parts, send_part, DeliveryJournal(Home(tmp_path / "home"), "p"))
    finished = spans.get_finished_spans()
    send = next(span for span in finished if span.name == "delivery.send")
    part_spans = [span for span in finished if span.name == "delivery.part"]
    assert [span.attributes["switchyard.part"] for span in part_spans] == sent == [0, 1, 2]
    assert all(span.parent is not None and span.parent.span_id == send.context.span_id for span in part_spans)


def test_a_trace_not_sampled_is_not_exported_and_its_message_says_so_downstream() -> None:
    memory = InMemorySpanExporter()
    installed = tracing.install(TelemetrySettings(sample_ratio=0), exporter=memory)
    try:
        assert installed is not None
        stamped = tracing.intake(make_incoming("hello"))
        flags = int((stamped.model_extra or {})["traceparent"].rsplit("-", 1)[1], 16)
        assert flags & 1 == 0  # not sampled, and so says the traceparent: the worker follows
        with messagespans.attempt(installed, stamped, 1, "job"):
            pass
        dropped = make_incoming("a dropped file")  # a derived trace follows the ratio too
        with messagespans.attempt(installed, dropped, 1, "job"):
            pass
        assert memory.get_finished_spans() == ()
    finally:
        tracing.uninstall()


@tracing.traced("broken", lambda value: {"switchyard.value": value.missing}, lambda result: 1 / 0)
async def _described_badly(value: int) -> int:
    return value + 1


async def test_a_span_that_cannot_be_described_never_fails_the_work(spans) -> None:
    assert await _described_badly(1) == 2
    [span] = spans.get_finished_spans()
    assert span.name == "broken" and not span.attributes
