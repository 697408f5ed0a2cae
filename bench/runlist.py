"""Listing runs in a home holding N finished runs: `python -m bench.runlist [--runs 5000,100000]`.

The runs are built directly through the run store (no chat, no fsync): each is created, claimed, ended
`done` with its result delivered (and settled, where the store keeps settled runs apart), as a one-step
chat run is. Then `switchyard runs --limit 5` and `switchyard status` run as processes five times each
(median and best wall time), and the dashboard's list (`recent(20)` of a fresh store) is timed in process;
the same for an empty home first.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gateway.home import Home
from orchestrator.runs.state import Conversation, RunState, StepState
from orchestrator.storage.files.runs import RunStore

SWITCHYARD = Path(sys.executable).with_name("switchyard")
REPEATS = 5
STOPPED = 3  # `switchyard status`'s exit code when no gateway runs on the home


def chat_run(index: int) -> RunState:
    """Run `index` of the bench: one `Reply` step, a message of one of 16 conversations."""
    conversation = f"c{index % 16}"
    message = {"channel": "bench", "channelProfileId": "bench", "sender": "Ada", "senderId": conversation,
               "message": f"hello, this is benchmark message number {index}", "timestamp": 1_700_000_000_000,
               "messageId": f"m{index:07d}", "conversationId": conversation}
    return RunState(runId=f"r-20231114-221320-{index:08x}", workflowId="chat", orchestratorId="main",
                    input={"message": message["message"]}, message=message,
                    conversation=Conversation(channel="bench", channelProfileId="bench", conversationId=conversation),
                    steps={"Reply": StepState(kind="agent", agent="echo")})


def build(home: Home, count: int) -> float:
    """Stores `count` finished chat runs through the file run store; returns the seconds it took."""
    store = RunStore(home, fsync=False)
    started = time.perf_counter()
    for index in range(count):
        run = store.create(chat_run(index), None, durable=False)
        run = store.transition(run, "running", save=False)
        run = store.update_step(run, "Reply", status="completed", output=f"You said: {index}", exitCode=0)
        run = store.transition(run, "done", save=False)
        run = store.save(run.model_copy(update={"delivery": "reply"}), durable=False)
        store.close_events(run.runId)
        settle = getattr(store, "settle", None)  # the store that keeps a finished run's record apart
        if settle is not None:
            settle(run)
    return time.perf_counter() - started


def timed_command(home: Home, *args: str) -> dict[str, Any]:
    """Wall seconds of `switchyard <args>` as a process, REPEATS times: median and best."""
    times = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        done = subprocess.run([str(SWITCHYARD), "--home", str(home.root), *args],
                              capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - started)
        if done.returncode not in (0, STOPPED):
            raise RuntimeError(done.stderr)
    return {"median_s": round(statistics.median(times), 3), "best_s": round(min(times), 3)}


def timed_dashboard(home: Home) -> float:
    """Seconds a fresh store takes to list the 20 runs changed last (the dashboard's list)."""
    started = time.perf_counter()
    RunStore(home, fsync=False).recent(20)
    return round(time.perf_counter() - started, 3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.runlist", description=__doc__)
    parser.add_argument("--runs", default="5000,100000", help="comma-separated numbers of retained runs")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="switchyard-runlist-"))
    results: list[dict[str, Any]] = []
    try:
        for count in [0, *(int(part) for part in args.runs.split(","))]:
            home = Home(scratch / f"home-{count}")
            home.create()
            built = build(home, count)
            listing = timed_command(home, "runs", "--limit", "5")
            status = timed_command(home, "status")
            results.append({"runs": count, "build_s": round(built, 1), "runs_limit_5": listing, "status": status,
                            "dashboard_s": timed_dashboard(home)})
            print(json.dumps(results[-1]), flush=True)
            shutil.rmtree(home.root, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
