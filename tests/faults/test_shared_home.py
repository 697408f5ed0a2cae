"""Two `switchyard run` processes on one home: the lone one starts sharing, no conversation runs twice at
once, and each conversation's messages run in the order they were written, whichever process runs them.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from gateway.files.sharing import SharedHome
from gateway.keys import KeyScheduler
from gateway.locks import LockDirectory
from gateway.testing import wait_until
from tests.faults.harness import FAST_ORCHESTRATOR, REPO, GatewayRun, message

SCRIPT = str(Path(__file__).with_name("misbehaving_provider.py"))
MESSAGES = 120
CONVERSATIONS = 6
RANDOM_MESSAGES = 500
RANDOM_CONVERSATIONS = 20


def test_a_second_process_makes_the_first_share_and_conversations_stay_sequential(tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    env = {"FAULT_LOG": str(log)}
    first = GatewayRun(tmp_path / "home", env=env, log=tmp_path / "first.log")
    first.configure(queue={"max_concurrency": 4, "fsync": False},
                    providers={"slowlog": {"command": [sys.executable, SCRIPT, "slowlog"], "timeout_sec": 20}},
                    orchestrator={**FAST_ORCHESTRATOR, "selector": {"provider": "slowlog"}})
    second = GatewayRun(tmp_path / "home", env=env, log=tmp_path / "second.log")
    first.start()
    ids = []
    for seq in range(MESSAGES):
        payload = message(seq, f"c{seq % CONVERSATIONS}")
        first.drop(payload, f"{seq:05d}.json")
        ids.append(payload.messageId)
    wait_until(lambda: log.exists() and log.read_text().count("\n") >= 4, 20)  # the first one is busy
    second.start()
    wait_until(lambda: first.count("queue.shared") == 1, 20)
    wait_until(lambda: {r["messageId"] for r in first.replies()} == set(ids), 60)
    assert first.stop() == 0 and second.stop() == 0

    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len({c["pid"] for c in calls}) == 2, "both processes did part of the work"
    by_conversation: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for call in calls:
        by_conversation[call["conversation"]].append(call)
    for conversation, runs in by_conversation.items():
        runs.sort(key=lambda c: c["start"])
        for earlier, later in zip(runs, runs[1:], strict=False):
            assert earlier["end"] <= later["start"], f"{conversation} ran twice at once"
        seqs = [int(c["messageId"].split("-")[1]) for c in runs]
        assert seqs == sorted(seqs), f"{conversation} ran out of order"


def test_two_processes_run_randomly_assigned_conversations_each_in_written_order(tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    env = {"FAULT_LOG": str(log)}
    first = GatewayRun(tmp_path / "home", env=env, log=tmp_path / "first.log")
    first.configure(queue={"max_concurrency": 4, "fsync": False},
                    providers={"slowlog": {"command": [sys.executable, SCRIPT, "slowlog"], "timeout_sec": 20}},
                    orchestrator={**FAST_ORCHESTRATOR, "selector": {"provider": "slowlog"}})
    second = GatewayRun(tmp_path / "home", env=env, log=tmp_path / "second.log")
    first.start()
    second.start()
    wait_until(lambda: first.count("queue.shared") == 1, 20)
    rng = random.Random(5)
    written: dict[str, list[str]] = defaultdict(list)
    for seq in range(RANDOM_MESSAGES):
        payload = message(seq, f"c{rng.randrange(RANDOM_CONVERSATIONS)}")
        first.drop(payload, f"{seq:05d}.json")
        written[payload.conversationId or ""].append(payload.messageId)
    wait_until(lambda: len(first.replies()) >= RANDOM_MESSAGES, 60)
    assert first.stop() == 0 and second.stop() == 0

    answered = [r["messageId"] for r in first.replies()]
    assert sorted(answered) == sorted(m for ids in written.values() for m in ids), "each answered exactly once"
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len({c["pid"] for c in calls}) == 2, "both processes did part of the work"
    ran: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for call in sorted(calls, key=lambda c: c["start"]):
        ran[call["conversation"]].append(call)
    out_of_order = {conversation: [c["messageId"] for c in runs] for conversation, runs in ran.items()
                    if [c["messageId"] for c in runs] != written[conversation]}
    assert not out_of_order, f"{len(out_of_order)} conversation(s) ran out of written order"


CHILD = """
import sys
from pathlib import Path
from gateway.files.sharing import SharedHome
home = SharedHome(Path(sys.argv[1]))
home.open()
print(home.mode, flush=True)
sys.stdin.readline()
home.poll()
print(home.mode, flush=True)
"""


def test_the_lone_process_lock_turns_shared_on_request_and_running_keys_get_locked(tmp_path: Path) -> None:
    lone = SharedHome(tmp_path)
    lone.open()
    assert lone.mode == "solo" and not lone.requested()
    scheduler: KeyScheduler[str] = KeyScheduler(4)
    scheduler.add((1, "a"), ("conv:x",), "running")
    assert [item for _, item in scheduler.ready()] == ["running"]
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], cwd=REPO, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "waiting"
        assert lone.requested()
        assert scheduler.lock_running(LockDirectory(tmp_path / "locks", holder="lone"))
        assert not LockDirectory(tmp_path / "locks", holder="other").acquire("conv:x")
        assert lone.share()
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "shared"
    finally:
        child.kill()
        child.communicate(timeout=10)
        lone.close()
    scheduler.finish(("conv:x",))
    assert LockDirectory(tmp_path / "locks", holder="other").acquire("conv:x")
