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

from gateway.backends.files.sharing import SharedHome, SoloLocks
from gateway.disk.locks import LockDirectory
from gateway.runtime.keys import KeyScheduler
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
from gateway.backends.files.sharing import SharedHome, SoloLocks
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


def test_a_lone_process_s_job_locks_are_files_only_once_another_process_shares_the_home(tmp_path: Path) -> None:
    # alone, a run's job lock is only remembered (no file a chat message); a process that comes meanwhile
    # takes none of them while it waits, and the lone one writes them out before it shares the home
    locks_dir = tmp_path / "locks"
    lone_home = SharedHome(tmp_path / "state")
    lone = SoloLocks(LockDirectory(locks_dir, holder="lone"), lone_home)
    assert lone.acquire("job:r-0") and len(list(locks_dir.iterdir())) == 1  # no worker of it on the home yet: files
    lone.release("job:r-0")
    lone_home.open()  # as the file runtime does before its handler starts
    assert lone.acquire("job:r-1") and lone.acquire("job:r-2") and lone_home.mode == "solo"
    lone.release("job:r-2")
    assert list(locks_dir.iterdir()) == []
    later_home = SharedHome(tmp_path / "state")  # another process (its own open file description)
    later = SoloLocks(LockDirectory(locks_dir, holder="later"), later_home)
    later_home.open()
    try:
        assert not later.acquire("job:r-1") and later_home.mode == "waiting"  # it may be held in memory
        assert lone_home.share()  # as its worker does when asked (the request names this same pid here)
        assert [LockDirectory.read(path).resource for path in locks_dir.glob("*.json")] == ["job:r-1"]
        assert not later.acquire("job:r-1") and later_home.mode == "shared"  # a file now, held by the lone one
        assert later.acquire("job:r-2")  # released while alone: free
        lone.release("job:r-1")
        assert later.acquire("job:r-1")
    finally:
        later_home.close()
        lone_home.close()


def test_a_waiting_process_that_finds_itself_alone_keeps_its_locks_in_memory(tmp_path: Path) -> None:
    # the lone process ended while the other waited: that one's next lock finds the home its own and is only
    # remembered, as a lone process's are (no file a chat message from then on)
    locks_dir = tmp_path / "locks"
    lone_home, later_home = SharedHome(tmp_path / "state"), SharedHome(tmp_path / "state")
    later = SoloLocks(LockDirectory(locks_dir, holder="later"), later_home)
    lone_home.open()
    later_home.open()
    try:
        assert not later.acquire("job:r-1") and later_home.mode == "waiting"
        lone_home.close()  # the lone process is gone
        assert later.acquire("job:r-1") and later_home.mode == "solo"
        assert not locks_dir.exists() or list(locks_dir.iterdir()) == []
    finally:
        later_home.close()
        lone_home.close()


STEP = ("import os, sys, time\n"
        "open(sys.argv[1], 'a').write(f'{os.getpid()}\\n')\n"
        "while os.path.exists(sys.argv[2]):\n"
        "    time.sleep(0.02)\n"
        "print('step done')\n")


def test_a_run_going_on_in_the_lone_process_is_not_run_again_by_a_process_that_comes_to_share(
        tmp_path: Path) -> None:
    log, hold = tmp_path / "steps.log", tmp_path / "hold"
    hold.touch()
    first = GatewayRun(tmp_path / "home", log=tmp_path / "first.log")
    first.configure(queue={"fsync": False}, orchestrator={
        **FAST_ORCHESTRATOR, "reply_within_sec": 0.2, "rules": {"default_workflow": "w"},
        "workflows": {"w": {"steps": [{"id": "S", "command": [sys.executable, "-c", STEP, str(log), str(hold)]}]}}})
    second = GatewayRun(tmp_path / "home", log=tmp_path / "second.log")
    first.start()
    first.drop(message(0, "c0"))
    wait_until(lambda: log.exists() and log.read_text().count("\n") == 1, 20)  # its step runs, in the first
    second.start()  # its start-up recovery looks at every unfinished run, this one too
    wait_until(lambda: first.count("queue.shared") == 1, 20)
    wait_until(lambda: first.count("gateway.started") == 2, 20)  # one events log: both processes
    hold.unlink()
    wait_until(lambda: any("step done" in r["message"] for r in first.replies()), 30)
    assert first.stop() == 0 and second.stop() == 0
    assert log.read_text().count("\n") == 1, "the step ran again in the second process"
    assert sum("step done" in r["message"] for r in first.replies()) == 1
