"""`switchyard run` with `telemetry:` really sends its traces over OTLP/HTTP: a receiver on 127.0.0.1 in the
test decodes what arrives and finds the message's trace, whole; without `telemetry:` nothing of OpenTelemetry
is even imported."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gateway.testing import wait_until
from tests.e2e.traces_kit import OtlpReceiver, say
from tests.faults.harness import GatewayRun

pytest.importorskip("opentelemetry.proto", reason="the otel extra (and opentelemetry-proto) is not installed")

pytestmark = pytest.mark.e2e

SECRET_TEXT = "the door code is 7731"
CHAT_ORCHESTRATOR = {"selector": {"provider": "rules"}, "diagnostics": {"provider": "rules"},
                     "reply_within_sec": 30, "rules": {"default_workflow": "chat"},
                     "agents": {"helper": {"provider": "remote", "prompt": "{{message}}"}},
                     "workflows": {"chat": {"description": "Talk with the helper agent",
                                            "steps": [{"id": "Reply", "agent": "helper"}]}}}
AGENT = "import sys; sys.stdin.read(); print('the agent answers')"


def test_the_otlp_exporter_sends_the_whole_trace_of_a_message(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        run = GatewayRun(tmp_path / "home", env={"SWITCHYARD_PLUGINS": "tests.e2e.traces_kit"})
        run.configure(queue={"fsync": False}, orchestrator=CHAT_ORCHESTRATOR,
                      channels=[{"id": "say", "type": "say"}],
                      providers={"remote": {"command": [sys.executable, "-c", AGENT]}},
                      telemetry={"endpoint": receiver.endpoint, "service_name": "switchyard-test"})
        run.start()
        try:
            say(run.home.root, "m1", SECRET_TEXT)
            wait_until(lambda: receiver.named("delivery.send"), 30)  # the batch exporter sends within ~5 s
        finally:
            assert run.stop() == 0
        spans = [span for span in receiver.spans]
    [intake] = [span for span in spans if span.name == "message.intake"]
    trace = [span for span in spans if span.trace_id == intake.trace_id]
    names = {span.name for span in trace}
    assert {"message.intake", "message.wait", "message.claim", "message.attempt", "selector.turn", "agent.turn",
            "workflow.run", "run.step", "delivery.send"} <= names
    assert len({span.trace_id for span in spans}) == 1, "one message, one trace"
    assert {span.service for span in spans} == {"switchyard-test"}
    assert all(SECRET_TEXT not in json.dumps(span.attributes, default=str) for span in spans)
    events = [json.loads(line) for line in run.home.events_file.read_text().splitlines()]
    succeeded = [event for event in events if event["event"] == "job.succeeded"]
    assert succeeded[0]["trace_id"] == intake.trace_id  # an event names the trace it belongs to


TELLS_ITS_TOKEN = "import sys; sys.stdin.read(); sys.exit('model refused key tok-81f3a9c2e7')"  # a CLI quoting a key


def test_a_failed_attempt_says_why_in_its_span_without_the_secrets(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        run = GatewayRun(tmp_path / "home", env={"SWITCHYARD_PLUGINS": "tests.e2e.traces_kit",
                                                 "DEMO_TOKEN": "tok-81f3a9c2e7"})
        run.configure(queue={"fsync": False, "max_attempts": 1}, channels=[{"id": "say", "type": "say"}],
                      orchestrator={**CHAT_ORCHESTRATOR, "selector": {"provider": "leaky"}},
                      providers={"leaky": {"command": [sys.executable, "-c", TELLS_ITS_TOKEN]},
                                 "remote": {"command": [sys.executable, "-c", AGENT]}},
                      dashboard={"token_env": "DEMO_TOKEN"},  # names the variable: its value is a secret
                      telemetry={"endpoint": receiver.endpoint})
        run.start()
        try:
            say(run.home.root, "m1", "hello")
            wait_until(lambda: receiver.named("message.attempt"), 30)
        finally:
            assert run.stop() == 0
    [attempt] = receiver.named("message.attempt")
    assert "model refused key ***" in attempt.status, attempt.status
    assert all("tok-81f3a9c2e7" not in f"{span.status}{span.attributes}" for span in receiver.spans)


OPENTELEMETRY_LOADED = """
import asyncio, sys
from pathlib import Path
from gateway.app import Gateway
from gateway.home import Home
from gateway.plugin_manager import build_plugin_manager
from gateway.settings import ChannelProfile, QueueSettings, Settings, TelemetrySettings
from gateway.testing import FakeChannel, async_wait_until
from gateway import hookimpl

class Plugin:
    def __init__(self):
        self.channel = FakeChannel("fake", "f1")
    @hookimpl
    def switchyard_channels(self, profile, context):
        return self.channel

async def main():
    telemetry = TelemetrySettings(exporter="console") if sys.argv[2] == "on" else None
    settings = Settings(queue=QueueSettings(fsync=False), channels=[ChannelProfile(id="f1", type="fake")],
                        telemetry=telemetry)
    plugin = Plugin()
    gateway = Gateway(Home(Path(sys.argv[1])), settings, build_plugin_manager(settings, extra=[plugin]))
    await gateway.start()
    await plugin.channel.inject("hello", conversationId="room")
    await async_wait_until(lambda: plugin.channel.sent)
    await gateway.stop()
    # the SDK and its exporters: what records and sends; `opentelemetry-api` alone is mcp's own dependency (the
    # chat tools' server imports it), and without an SDK its spans are no-ops that record nothing
    loaded = sorted(name for name in sys.modules if name.startswith(("opentelemetry.sdk", "opentelemetry.exporter")))
    print("LOADED", len(loaded), file=sys.stderr)

asyncio.run(main())
"""


@pytest.mark.parametrize("telemetry", ["off", "on"])
def test_without_telemetry_no_opentelemetry_sdk_is_imported(tmp_path: Path, telemetry: str) -> None:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(OPENTELEMETRY_LOADED), str(tmp_path / "home"),
                           telemetry], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = int(done.stderr.rsplit("LOADED", 1)[1].split()[0])
    assert (loaded == 0) if telemetry == "off" else (loaded > 0), done.stderr[-500:]
