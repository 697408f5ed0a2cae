"""The chat path of P7 (issue 21): an in-process agent behind a real one-step run, on files and on PostgreSQL.

The `rules` selector starts the workflow `chat` for every message; its one step asks the agent `helper`,
whose provider `agent` is in process and takes 200 ms (`asyncio.sleep`), so the bench measures the queue,
the run and the delivery rather than process spawns. Its answer names its process (`(pid N)`), so the
bench can tell how many messages the `switchyard run` answered itself. `files_chat` measures the file
backend's `switchyard run` on the same orchestrator: the reference for the CPU per message.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from bench.process import count_events, cpu_split

AGENT_S = 0.2
CHAT_ORCHESTRATOR = {
    "selector": {"provider": "rules"}, "diagnostics": {"provider": "rules"},
    "agents": {"helper": {"provider": "agent", "prompt": "{{message}}"}},
    "workflows": {"chat": {"description": "Reply", "steps": [{"id": "Reply", "agent": "helper"}]}},
    "rules": {"default_workflow": "chat"},
}
REPO = Path(__file__).resolve().parents[1]


async def agent(prompt: str, request: dict[str, Any]) -> str:
    """The chat agent: takes AGENT_S, answers with a fixed text naming its process."""
    await asyncio.sleep(AGENT_S)
    return f"the fixed answer (pid {os.getpid()})"


def write_home(home: Path, queue: dict[str, Any], channels: list[dict[str, Any]],
               orchestrator: dict[str, Any]) -> None:
    """A bench home: settings.yaml with these queue options and channel profiles, one orchestrator."""
    (home / "orchestrators" / "main").mkdir(parents=True)
    (home / "settings.yaml").write_text(yaml.safe_dump({"queue": queue, "channels": channels}))
    (home / "orchestrators" / "main" / "orchestrator.yaml").write_text(yaml.safe_dump(orchestrator))


def _payload(seq: int, conversation: str) -> bytes:
    return json.dumps({"channel": "bench", "channelProfileId": "bench", "sender": "b", "senderId": conversation,
                       "message": f"hello {seq}", "timestamp": 1_700_000_000_000 + seq,
                       "messageId": f"{conversation}-{seq:06d}", "conversationId": conversation}).encode()


def files_chat(root: Path, messages: int, conversations: int, concurrency: int) -> dict[str, Any]:
    """One `switchyard run` on the file backend (fsync off, as the workers' spool files): messages dropped
    at once into `incoming/`, timed to the last reply sent; CPU per message of the process."""
    home = root / f"files-{time.time_ns()}"
    write_home(home, {"fsync": False, "max_concurrency": concurrency, "duplicate_window_sec": 0},
               [{"id": "bench", "type": "bench"}], CHAT_ORCHESTRATOR)
    env = {**os.environ, "SWITCHYARD_PLUGINS": "bench.scaleout,bench.plugin", "PYTHONPATH": str(REPO)}
    env.pop("SWITCHYARD_HOME", None)
    events = home / "logs" / "events.jsonl"
    with open(home.with_suffix(".log"), "wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "gateway.cli", "--home", str(home), "run"],
                                   env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not count_events(events, "gateway.started"):
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"switchyard run did not start; see {home.with_suffix('.log')}")
            time.sleep(0.1)
        incoming = home / "queue" / "incoming"
        before = cpu_split(process.pid)
        started = time.perf_counter()
        for seq in range(messages):
            tmp = incoming / f"{seq:07d}.tmp"
            tmp.write_bytes(_payload(seq, f"c{seq % conversations:03d}"))
            os.rename(tmp, incoming / f"{seq:07d}.json")
        while count_events(events, "outgoing.sent") < messages:
            time.sleep(0.1)
        elapsed = time.perf_counter() - started
        user, system = (after - b for after, b in zip(cpu_split(process.pid), before, strict=True))
    finally:
        process.terminate()
        process.wait(30)
    return {"path": "chat", "backend": "files", "messages": messages, "seconds": round(elapsed, 2),
            "msg_s": round(messages / elapsed, 1), "run_cpu_ms": round((user + system) * 1000 / messages, 2),
            "run_sys_ms": round(system * 1000 / messages, 2)}


def probe(cluster: Any, messages: int, conversations: int, folder: Path) -> dict[str, Any]:
    """With the cluster started under BENCH_PROBE (bench/probe.py): a warm-up, then `messages` counted or
    profiled; returns each process kind's statements and round trips per message."""
    everyone = [*cluster.processes, *([cluster.run_process] if cluster.run_process else [])]
    seq = 0

    def send(count: int) -> None:
        nonlocal seq
        target = cluster.done() + count
        for _ in range(count):
            conversation = f"c{seq % conversations:03d}"
            cluster.drop(cluster.homes[(seq % conversations) % len(cluster.homes)], f"{seq:07d}.json",
                         cluster.payload(seq, conversation))
            seq += 1
        while cluster.done() < target:
            time.sleep(0.05)

    send(min(50, messages))  # warm-up: pools, prepared plans, first imports
    time.sleep(1)
    for process in everyone:
        os.kill(process.pid, signal.SIGUSR2)
    time.sleep(0.5)
    send(messages)
    time.sleep(1)  # the last replies' bookkeeping (journal, receipts) after `sent`
    for process in everyone:
        os.kill(process.pid, signal.SIGUSR1)
    deadline = time.monotonic() + 30
    while len(list(folder.glob("*-*.json")) + list(folder.glob("profile-*.txt"))) < len(everyone):
        if time.monotonic() > deadline:
            raise RuntimeError("the probed processes did not write their figures")
        time.sleep(0.1)
    kinds: dict[str, dict[str, Counter[str]]] = {}
    for file in folder.glob("*-*.json"):
        data = json.loads(file.read_text())
        kind = kinds.setdefault(file.name.split("-")[0], {"counts": Counter(), "statements": Counter()})
        kind["counts"].update(data["counts"])
        kind["statements"].update(data["statements"])
    return {name: {"per_message": {k: round(v / messages, 2) for k, v in sorted(kind["counts"].items())},
                   "statements_per_message": round(sum(kind["statements"].values()) / messages, 2),
                   "statements": {text: round(n / messages, 2) for text, n in kind["statements"].most_common(40)}}
            for name, kind in sorted(kinds.items())}
