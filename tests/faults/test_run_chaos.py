"""kill -9 chaos on the chat path: workflow runs killed at random moments lose no message, keep order, and
never run a step again once it finished (the next step started, or its completion was written)."""

from __future__ import annotations

import functools
import json
import random
from collections import defaultdict
from pathlib import Path

from gateway.testing import wait_until
from tests.faults.harness import GatewayRun, message

MESSAGES = 120
CONVERSATIONS = 12
KILLS = 8
STEP = ('cat > /dev/null\n'
        'printf \'{"run": "%s", "step": "%s"}\\n\' "$SWITCHYARD_RUN_ID" "$SWITCHYARD_STEP_ID" >> "$CHAOS_LOG"\n'
        'echo "answer of $SWITCHYARD_STEP_ID"\n')
ORCHESTRATOR = {"selector": {"provider": "rules"}, "diagnostics": {"provider": "rules"}, "reply_within_sec": 120,
                "agents": {"helper": {"provider": "sh", "prompt": "{{message}}"}},
                "workflows": {"chat": {"description": "Reply", "steps": [{"id": "First", "agent": "helper"},
                                                                         {"id": "Second", "agent": "helper"}]}},
                "rules": {"default_workflow": "chat"}}


def _calls(log: Path) -> list[tuple[str, str]]:
    """(run, step) of every step process started so far, in order."""
    try:
        lines = log.read_text().splitlines()
    except FileNotFoundError:
        return []
    return [(call["run"], call["step"]) for call in map(json.loads, lines)]


def _completed(run: GatewayRun) -> set[tuple[str, str]]:
    """(run, step) of every step whose completion state.json records."""
    done = set()
    for path in run.home.runs.glob("*/state.json"):
        state = json.loads(path.read_bytes())
        done |= {(state["runId"], step) for step, fields in state["steps"].items() if fields["status"] == "completed"}
    return done


def _progressed(run: GatewayRun, wanted: int) -> bool:
    if run.queued_files() == 0:
        return True
    return len(run.replies()) >= wanted and any(run.home.processing.rglob("*.json"))


def test_kill_9_during_runs_loses_no_message_and_reruns_no_completed_step(tmp_path: Path) -> None:
    rng = random.Random(11)
    log = tmp_path / "steps.jsonl"
    script = tmp_path / "step.sh"
    script.write_text(STEP)
    run = GatewayRun(tmp_path / "home")
    run.configure(queue={"fsync": True, "max_concurrency": 8}, orchestrator=ORCHESTRATOR,
                  providers={"sh": {"command": ["/bin/sh", str(script)], "env": {"CHAOS_LOG": str(log)}}})
    sent: list[str] = []
    at_kills: list[tuple[set[tuple[str, str]], int]] = []  # steps recorded completed, calls made so far
    batch = MESSAGES // KILLS
    for cycle in range(KILLS):
        for seq in range(cycle * batch, (cycle + 1) * batch):
            payload = message(seq, f"c{seq % CONVERSATIONS:02d}")
            run.drop(payload, f"{seq:07d}.json")
            sent.append(payload.messageId)
        run.start()
        wanted = len(run.replies()) + rng.randint(1, batch)
        if rng.random() < 0.8:
            wait_until(functools.partial(_progressed, run, wanted), 60, interval_s=0.005)
        run.kill()
        at_kills.append((_completed(run), len(_calls(log))))
    run.start()
    wait_until(lambda: run.queued_files() == 0, 120)
    assert run.stop() == 0

    replies: dict[str, list[str]] = defaultdict(list)
    order: dict[str, list[str]] = defaultdict(list)
    for reply in run.replies():
        if not replies[reply["messageId"]]:
            order[reply["conversationId"]].append(reply["messageId"])
        replies[reply["messageId"]].append(reply["message"])
    assert set(replies) == set(sent), "every message is answered"
    assert all(texts == ["answer of Second"] * len(texts) for texts in replies.values()), "each reply is the result"
    for conversation, ids in order.items():
        assert ids == sorted(ids), f"replies of {conversation} out of order"
    states = [json.loads(p.read_bytes()) for p in run.home.runs.glob("*/state.json")]
    assert len(states) == MESSAGES and {s["state"] for s in states} == {"done"}
    calls = _calls(log)
    per_run: dict[str, list[str]] = defaultdict(list)
    for run_id, step in calls:
        per_run[run_id].append(step)
    for run_id, steps in per_run.items():  # a step is finished once the next one started: it never runs again
        assert "First" not in steps[steps.index("Second"):], f"{run_id} ran First again after Second: {steps}"
    for completed, made in at_kills:
        again = [call for call in calls[made:] if call in completed]
        assert not again, f"steps ran again after their completion was written: {again[:3]}"
    interrupted = [set(calls[:made]) - completed for completed, made in at_kills]
    assert sum(1 for steps in interrupted if steps) >= KILLS // 2, "the kills hit steps in flight"
