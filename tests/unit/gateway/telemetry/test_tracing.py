"""One message, one trace: a Gateway in this process with telemetry on and an in-memory span exporter.

What an operator reads in their tracing tool: every span of the message's path in one trace, each under the
right parent, the queue time as the wait, one attempt span per attempt, no message text unless asked for.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from opentelemetry.sdk.trace import ReadableSpan  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from gateway.app import Gateway  # noqa: E402
from gateway.home import Home  # noqa: E402
from gateway.plugin_manager import build_plugin_manager  # noqa: E402
from gateway.settings import ChannelProfile, ProviderSettings, QueueSettings, Settings, TelemetrySettings  # noqa: E402
from gateway.telemetry import tracing  # noqa: E402
from gateway.telemetry.events import read_events  # noqa: E402
from gateway.testing import async_wait_until, drop_incoming, make_incoming  # noqa: E402
from tests.fakes.channels import FakeChannelPlugin  # noqa: E402

SECRET_TEXT = "my bank PIN is 4921"

AGENT = "import sys; sys.stdin.read(); print('the agent answers')"
"""The workflow step's agent: a generic argv provider that answers without repeating the prompt."""

FLAKY_SELECTOR = """
import json, pathlib, sys
sys.stdin.read()
counter = pathlib.Path(sys.argv[1])
tries = int(counter.read_text()) if counter.exists() else 0
counter.write_text(str(tries + 1))
if tries < 2:
    sys.exit("the selector's model is away")
print(json.dumps({"action": "workflow_start", "workflowId": "chat", "input": {}}))
"""

ORCHESTRATOR = """
selector: {provider: %s}
diagnostics: {provider: rules}
reply_within_sec: 60
rules: {default_workflow: chat}
agents:
  helper: {provider: remote, prompt: "{{message}}"}
workflows:
  chat:
    description: Talk with the helper agent
    steps:
      - {id: Reply, agent: helper}
"""


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """The process's tracer, exporting into memory (installed before the Gateway, which keeps it)."""
    memory = InMemorySpanExporter()
    tracing.install(TelemetrySettings(), exporter=memory)
    yield memory
    tracing.uninstall()


async def _gateway(home: Home, tmp_path: Path, selector: str, **channel: Any) -> tuple[Gateway, FakeChannelPlugin]:
    workspace = home.root / "orchestrators" / "main"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "orchestrator.yaml").write_text(textwrap.dedent(ORCHESTRATOR % selector))
    script = tmp_path / "selector.py"
    script.write_text(FLAKY_SELECTOR)
    settings = Settings(
        queue=QueueSettings(fsync=False, backoff_initial_ms=10, backoff_max_ms=20, max_attempts=5),
        channels=[ChannelProfile(id="f1", type="fake")],
        providers={"remote": ProviderSettings(command=[sys.executable, "-c", AGENT]),
                   "flaky": ProviderSettings(command=[sys.executable, str(script), str(tmp_path / "tries")])},
        telemetry=TelemetrySettings(),
    )
    plugin = FakeChannelPlugin()
    gateway = Gateway(home, settings, build_plugin_manager(settings, extra=[plugin]))
    await gateway.start()
    fake = plugin.channels["f1"]
    fake.fail_times, fake.retry_after = channel.get("fail_times", 0), channel.get("retry_after")
    return gateway, plugin


@pytest.fixture
async def stopped_after(home: Home) -> AsyncIterator[list[Gateway]]:
    started: list[Gateway] = []
    yield started
    for gateway in started:
        await gateway.stop()


def _by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, list[ReadableSpan]]:
    named: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        named.setdefault(span.name, []).append(span)
    return named


def _parent(span: ReadableSpan, spans: tuple[ReadableSpan, ...]) -> ReadableSpan | None:
    assert span.parent is not None, f"{span.name} has no parent"
    found = [s for s in spans if s.context.span_id == span.parent.span_id]
    return found[0] if found else None


async def test_a_chat_message_is_one_trace_of_every_step_each_under_its_parent(
        exporter, home: Home, tmp_path: Path, stopped_after) -> None:
    gateway, plugin = await _gateway(home, tmp_path, "rules", fail_times=1, retry_after=0.05)
    stopped_after.append(gateway)
    channel = plugin.channels["f1"]
    await channel.inject(SECRET_TEXT, conversationId="room")
    sent = await async_wait_until(lambda: channel.sent)
    assert sent[0].message == "the agent answers"
    await async_wait_until(lambda: len(_by_name(exporter.get_finished_spans()).get("delivery.send", [])) == 2)
    spans = exporter.get_finished_spans()
    named = _by_name(spans)

    assert len({span.context.trace_id for span in spans}) == 1, sorted(s.name for s in spans)
    intake = named["message.intake"][0]
    assert intake.parent is None  # the trace starts where the channel handed the message over
    for child in ("message.wait", "message.claim", "message.attempt"):
        assert _parent(named[child][0], spans) is intake, child
    wait, attempt = named["message.wait"][0], named["message.attempt"][0]
    assert wait.start_time // 1_000_000 == intake.start_time // 1_000_000  # the queue time: from intake...
    assert wait.end_time <= attempt.start_time + 1_000_000  # ... to the attempt that took it
    assert wait.attributes["switchyard.queue_ms"] >= 0

    selector = named["selector.turn"][0]
    assert _parent(selector, spans) is attempt
    turns = named["agent.turn"]
    rules_turn = next(turn for turn in turns if turn.attributes["switchyard.provider"] == "rules")
    assert _parent(rules_turn, spans) is selector
    run = named["workflow.run"][0]
    assert _parent(run, spans) is intake  # the run is executed by the run executor, in the message's trace
    step = named["run.step"][0]
    assert _parent(step, spans) is run and step.attributes["switchyard.step"] == "Reply"
    agent_turn = next(turn for turn in turns if turn.attributes["switchyard.provider"] == "remote")
    assert _parent(agent_turn, spans) is step
    assert agent_turn.attributes["switchyard.provider_type"] == "command"
    assert agent_turn.attributes["switchyard.exit_code"] == 0

    first, second = sorted(named["delivery.send"], key=lambda span: span.start_time)
    assert first.attributes["switchyard.rate_limited"] is True and first.attributes["switchyard.retry_in_s"] == 0.05
    assert second.attributes["switchyard.attempt"] == 2
    assert first.status.status_code.name == "UNSET" or first.status.status_code.name == "ERROR"

    run_row = gateway.pm.hook.switchyard_recent_runs(limit=5, home=home, settings=gateway.settings,
                                                     backend=gateway.backend)
    trace_id = f"{intake.context.trace_id:032x}"
    assert [r["traceId"] for found in run_row for r in found] == [trace_id]  # what the dashboard links
    claimed = [e for e in read_events(home.events_file) if e["event"] == "message.claimed"]
    succeeded = [e for e in read_events(home.events_file) if e["event"] == "job.succeeded"]
    assert claimed and succeeded and succeeded[0]["trace_id"] == trace_id

    for span in spans:  # nothing anyone wrote reaches the tracing tool by default
        for value in (span.attributes or {}).values():
            assert SECRET_TEXT not in str(value) and "the agent answers" not in str(value), span.name


@pytest.mark.parametrize("arrival", ["channel", "dropped file"])
async def test_a_message_retried_twice_keeps_its_trace_with_three_attempt_spans(
        exporter, home: Home, tmp_path: Path, stopped_after, arrival: str) -> None:
    gateway, plugin = await _gateway(home, tmp_path, "flaky")
    stopped_after.append(gateway)
    channel = plugin.channels["f1"]
    if arrival == "channel":
        await channel.inject("hello", conversationId="room")
    else:  # no trace context in the file: its identity names its trace
        drop_incoming(home, make_incoming("hello", channel="fake", channelProfileId="f1", conversationId="room"),
                      "dropped.json")
        gateway.queue.notice("dropped.json")
    await async_wait_until(lambda: channel.sent, 20)
    await async_wait_until(lambda: _by_name(exporter.get_finished_spans()).get("delivery.send"))
    spans = exporter.get_finished_spans()
    attempts = sorted(_by_name(spans)["message.attempt"], key=lambda span: span.start_time)
    assert [span.attributes["switchyard.attempt"] for span in attempts] == [1, 2, 3]
    assert len({span.context.trace_id for span in spans}) == 1, "claims, attempts, run, delivery: one trace"
    assert len(_by_name(spans)["message.claim"]) == 3
    assert [span.status.status_code.name for span in attempts] == ["ERROR", "ERROR", "UNSET"]
    assert len(_by_name(spans)["message.wait"]) == 1  # the queue time is the first attempt's


async def test_content_reaches_spans_only_when_asked_for(home: Home, tmp_path: Path, stopped_after) -> None:
    memory = InMemorySpanExporter()
    tracing.install(TelemetrySettings(content=True), exporter=memory)
    try:
        gateway, plugin = await _gateway(home, tmp_path, "rules")
        stopped_after.append(gateway)
        channel = plugin.channels["f1"]
        await channel.inject(SECRET_TEXT, conversationId="room")
        await async_wait_until(lambda: channel.sent)
        await async_wait_until(lambda: _by_name(memory.get_finished_spans()).get("delivery.send"))
        named = _by_name(memory.get_finished_spans())
        assert named["message.intake"][0].attributes["switchyard.content.message"] == SECRET_TEXT
        remote = next(t for t in named["agent.turn"] if t.attributes["switchyard.provider"] == "remote")
        assert remote.attributes["switchyard.content.answer"].strip() == "the agent answers"
    finally:
        tracing.uninstall()


QUESTION_ORCHESTRATOR = """
selector: {provider: rules}
diagnostics: {provider: rules}
reply_within_sec: 60
rules: {default_workflow: chat}
agents:
  helper: {provider: remote, prompt: "{{message}}"}
workflows:
  chat:
    description: Ask, then talk with the helper agent
    steps:
      - {id: Ask, input: {prompt: "Which branch?"}}
      - {id: Reply, agent: helper}
"""


async def test_a_question_waited_on_is_the_gap_between_the_runs_spans_in_the_first_messages_trace(
        exporter, home: Home, tmp_path: Path, stopped_after) -> None:
    gateway, plugin = await _gateway(home, tmp_path, "rules")
    stopped_after.append(gateway)
    (home.root / "orchestrators" / "main" / "orchestrator.yaml").write_text(textwrap.dedent(QUESTION_ORCHESTRATOR))
    channel = plugin.channels["f1"]
    await channel.inject("start please", conversationId="room")
    await async_wait_until(lambda: [p for p in channel.sent if "Which branch?" in p.message])
    await channel.inject("main", conversationId="room")
    await async_wait_until(lambda: [p for p in channel.sent if p.message == "the agent answers"])
    await async_wait_until(lambda: len(_by_name(exporter.get_finished_spans()).get("workflow.run", [])) == 2)
    spans = exporter.get_finished_spans()
    asked, resumed = sorted(_by_name(spans)["workflow.run"], key=lambda span: span.start_time)
    first_intake = min(_by_name(spans)["message.intake"], key=lambda span: span.start_time)
    assert asked.context.trace_id == resumed.context.trace_id == first_intake.context.trace_id
    assert asked.attributes["switchyard.waits_for_input"] == "Ask"
    assert resumed.start_time > asked.end_time  # the gap: the question waited on
