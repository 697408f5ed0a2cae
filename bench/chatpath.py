"""P6, the chat path: each message runs rules → workflow_start chat → one agent step whose provider is a
/bin/sh script printing a fixed answer (one spawn per message, fsync on). Reports the gateway's own CPU
per message, the rate, the latency a message adds over the provider's own run time, and file calls;
then the same for a five-step run, as a cost per step."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.fileops import count_file_calls
from bench.providers import _bare
from bench.rig import Rig, bench_settings, payload
from bench.throughput import throughput
from gateway.settings import ProviderSettings, Settings, TelemetrySettings

ANSWER_SCRIPT = "cat > /dev/null\necho 'the fixed answer'\n"
CHAT_ORCHESTRATOR = (
    "selector: {provider: rules}\ndiagnostics: {provider: rules}\n"
    "agents: {helper: {provider: sh, prompt: '{{message}}'}}\n"
    "workflows: {chat: {description: Reply, steps: [{id: Reply, agent: helper}]}}\n"
    "rules: {default_workflow: chat}\n"
)
STEPS = 5
FIVE_STEP_ORCHESTRATOR = CHAT_ORCHESTRATOR.replace(
    "steps: [{id: Reply, agent: helper}]", "steps: [" + ", ".join(f"{{id: S{n}, agent: helper}}" for n in range(STEPS))
    + "]")


def chat_settings(script: Path) -> Settings:
    """fsync on, one bench channel, the `sh` provider running the answer script."""
    settings = bench_settings(fsync=True)
    return settings.model_copy(update={"providers": {"sh": ProviderSettings(command=["/bin/sh", str(script)])}})


def _answer_script(scratch: Path) -> Path:
    scratch.mkdir(parents=True, exist_ok=True)
    script = scratch / "answer.sh"
    script.write_text(ANSWER_SCRIPT)
    return script


async def _latencies(root: Path, settings: Settings, count: int, orchestrator: str = CHAT_ORCHESTRATOR
                     ) -> tuple[list[float], float]:
    """Sends `count` messages one at a time (low rate) and times each from the sink to its delivery;
    returns the times and the process's CPU ms per message over them."""
    times: list[float] = []
    async with Rig(root, settings, orchestrator) as rig:
        channel = rig.channel
        assert channel.sink is not None
        cpu_before = os.times()
        for index in range(count):
            channel.expect(1)
            started = time.perf_counter_ns()
            await channel.sink(payload(index, 1))
            await asyncio.wait_for(channel.done.wait(), 60)
            times.append((channel.delivered[0][2] - started) / 1e6)
        cpu_after = os.times()
    shutil.rmtree(root, ignore_errors=True)
    cpu = (cpu_after.user - cpu_before.user + cpu_after.system - cpu_before.system) * 1000 / count
    return times, cpu


async def _per_step(scratch: Path, settings: Settings, count: int, provider_p50: float) -> dict[str, Any]:
    """A five-step run per message, one at a time: its latency and CPU per step, and the time per step
    over the provider's own run."""
    times, cpu = await _latencies(scratch / "p6-steps", settings, count, FIVE_STEP_ORCHESTRATOR)
    p50 = statistics.median(times)
    return {"steps": STEPS, "messages": count, "latency_p50_ms": round(p50, 3), "ms_per_step": round(p50 / STEPS, 3),
            "overhead_per_step_ms": round(p50 / STEPS - provider_p50, 3), "cpu_ms_per_step": round(cpu / STEPS, 3)}


async def p6(scratch: Path, *, count: int, conversations: int, latency_count: int) -> dict[str, Any]:
    """Throughput and CPU for `count` messages over `conversations`, then low-rate latency and file calls."""
    script = _answer_script(scratch)
    settings = chat_settings(script)
    row = await throughput(scratch / "p6", count, conversations, fsync=True, orchestrator=CHAT_ORCHESTRATOR,
                           settings=settings)
    latencies, latency_cpu = await _latencies(scratch / "p6-latency", settings, latency_count)
    bare = [await _bare(["/bin/sh", str(script)]) for _ in range(latency_count)]
    steps = await _per_step(scratch, settings, latency_count, statistics.median(bare))
    calls_count = max(50, count // 10)
    with count_file_calls() as counter:
        await throughput(scratch / "p6-calls", calls_count, conversations, fsync=True,
                         orchestrator=CHAT_ORCHESTRATOR, settings=settings)
    overhead = statistics.median(latencies) - statistics.median(bare)
    traced = await _traced(scratch, settings, count, conversations, latency_count)
    return {**row, "cpu_ms": round(row["user_ms"] + row["sys_ms"], 3), "traced": traced,
            "latency_p50_ms": round(statistics.median(latencies), 3),
            "provider_p50_ms": round(statistics.median(bare), 3), "overhead_p50_ms": round(overhead, 3),
            "latency_cpu_ms": round(latency_cpu, 3), "five_steps": steps,
            "calls": {kind: round(value / calls_count, 2) for kind, value in sorted(counter.items())}}


OTLP_SINK = """
import http.server
class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
print(server.server_address[1], flush=True)
server.serve_forever()
"""
"""An OTLP/HTTP endpoint that accepts every export and keeps nothing (in its own process: its CPU is not ours)."""


@contextlib.contextmanager
def _otlp_sink() -> Iterator[str]:
    sink = subprocess.Popen([sys.executable, "-c", OTLP_SINK], stdout=subprocess.PIPE, text=True)
    try:
        assert sink.stdout is not None
        yield f"http://127.0.0.1:{sink.stdout.readline().strip()}"
    finally:
        sink.terminate()
        sink.wait(10)


async def _traced(scratch: Path, settings: Settings, count: int, conversations: int,
                  latency_count: int) -> dict[str, Any] | None:
    """The same chat path with `telemetry:` on, every span exported over OTLP/HTTP to a sink in another process:
    the CPU tracing adds per message (the batch exporter's thread included); None without the otel extra."""
    try:
        import opentelemetry.sdk  # noqa: F401  # imported only here, after the runs with telemetry off
    except ImportError:
        return None
    with _otlp_sink() as endpoint:
        traced = settings.model_copy(update={"telemetry": TelemetrySettings(endpoint=endpoint)})
        row = await throughput(scratch / "p6-traced", count, conversations, fsync=True,
                               orchestrator=CHAT_ORCHESTRATOR, settings=traced)
        latencies, latency_cpu = await _latencies(scratch / "p6-traced-latency", traced, latency_count)
    return {"rate": row["rate"], "cpu_ms": round(row["user_ms"] + row["sys_ms"], 3),
            "latency_p50_ms": round(statistics.median(latencies), 3), "latency_cpu_ms": round(latency_cpu, 3)}
