"""An approval waited on is a span of the agent turn that asked it, with the choice made; the tool's title (what
the agent wants to run) is content, kept out of the span by default."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from gateway.settings import TelemetrySettings  # noqa: E402
from gateway.telemetry import tracing  # noqa: E402
from tests.unit.orchestrator.chat.test_approvals import Running, running  # noqa: E402, F401


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    tracing.install(TelemetrySettings(), exporter=memory)
    yield memory
    tracing.uninstall()


async def test_an_approval_waited_on_is_a_span_of_the_turn_that_asked(spans, running: Running) -> None:  # noqa: F811
    with tracing.span("agent.turn"):
        turn = running.ask()
    question = await running.question()
    await running.say("1")
    assert await asyncio.wait_for(turn, 5) == "allow-1"
    named = {span.name: span for span in spans.get_finished_spans()}
    waited, asked = named["approval.wait"], named["agent.turn"]
    assert waited.parent is not None and waited.parent.span_id == asked.context.span_id
    assert waited.attributes == {"switchyard.choice": "allow-1"}  # no "Run: make deploy"
    assert question.message  # the conversation was asked
