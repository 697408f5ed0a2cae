"""One message, one trace across hosts: a `switchyard run` takes messages in from its channel and delivers the
replies, a `switchyard worker` on another home answers some of them; every span of a message, from whichever
process, shares its trace id (the context travels in the message's row and in its reply's).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gateway.testing import wait_until
from tests.backends.postgres.test_workers import PgProcess
from tests.e2e.traces_kit import OtlpReceiver, say

pytest.importorskip("opentelemetry.proto", reason="the otel extra (and opentelemetry-proto) is not installed")

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

MESSAGES = 6


def _traced(process: PgProcess, endpoint: str, **settings: object) -> PgProcess:
    loaded = yaml.safe_load(process.home.settings_file.read_text())
    loaded.update({"telemetry": {"endpoint": endpoint}, **settings})
    process.home.settings_file.write_text(yaml.safe_dump(loaded))
    return process


def test_the_spans_of_a_message_from_the_run_and_the_worker_share_one_trace(tmp_path: Path, db: str) -> None:
    log = tmp_path / "calls.jsonl"
    with OtlpReceiver() as receiver:
        worker = _traced(PgProcess(tmp_path / "worker", db, log, slow_s=1.0).setup(), receiver.endpoint)
        run = PgProcess(tmp_path / "run", db, log, role="run", slow_s=1.0)
        run.env["SWITCHYARD_PLUGINS"] = "tests.e2e.traces_kit"
        run.setup(max_concurrency=1)  # the run answers one at a time: the worker takes the others
        _traced(run, receiver.endpoint, channels=[{"id": "say", "type": "say"}])
        worker.start()
        run.start()
        try:
            for seq in range(MESSAGES):
                say(run.home.root, f"c{seq}", f"hello {seq}")
            wait_until(lambda: len(receiver.named("delivery.send")) >= MESSAGES, 90)
        finally:
            assert run.stop() == 0
            assert worker.stop() == 0
    intakes = receiver.named("message.intake")
    assert len(intakes) == MESSAGES and {span.role for span in intakes} == {"run"}
    traces = {span.trace_id for span in intakes}
    attempts = receiver.named("message.attempt")
    deliveries = receiver.named("delivery.send")
    assert sorted(span.trace_id for span in attempts) == sorted(traces), "each message: one attempt, in its trace"
    assert {span.trace_id for span in deliveries} == traces and {span.role for span in deliveries} == {"run"}
    by_worker = {span.trace_id for span in attempts if span.role == "worker"}
    assert by_worker, "the worker answered none: the test proves nothing"
    for trace_id in by_worker:  # taken in by one process, answered by another, delivered by the first: one trace
        roles = {span.role for span in receiver.spans if span.trace_id == trace_id}
        assert roles == {"run", "worker"}
        waited = [span for span in receiver.named("message.wait") if span.trace_id == trace_id]
        assert len(waited) == 1 and waited[0].role == "worker"
