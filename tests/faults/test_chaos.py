"""kill -9 chaos: a gateway killed at random moments, restarted each time, loses nothing and keeps order."""

from __future__ import annotations

import functools
import random
from collections import defaultdict
from pathlib import Path

from gateway.testing import wait_until
from tests.faults.harness import GatewayRun, message

MESSAGES = 1200
CONVERSATIONS = 40
KILLS = 24


def _progressed(run: GatewayRun, wanted: int) -> bool:
    """Enough replies and some message claimed right now (so the kill interrupts work), or all done."""
    if run.queued_files() == 0:
        return True
    return len(run.replies()) >= wanted and any(run.home.processing.rglob("*.json"))


def _in_flight(run: GatewayRun, names: dict[str, str]) -> set[str]:
    """Message ids whose files sit claimed in processing/ (the work a kill interrupts)."""
    return {names[p.name] for p in run.home.processing.rglob("*.json") if p.name in names}


def test_random_kill_9_loses_nothing_keeps_order_and_duplicates_only_in_flight_work(tmp_path: Path) -> None:
    rng = random.Random(5)
    run = GatewayRun(tmp_path / "home")
    run.configure(queue={"fsync": True, "max_concurrency": 8})
    names: dict[str, str] = {}
    in_flight_at_kills: list[set[str]] = []
    batch = MESSAGES // KILLS
    for cycle in range(KILLS):
        for seq in range(cycle * batch, (cycle + 1) * batch):
            payload = message(seq, f"c{seq % CONVERSATIONS:02d}")
            names[run.drop(payload, f"{seq:07d}.json")] = payload.messageId
        run.start()
        answered_before = len(run.replies())
        wanted = answered_before + rng.randint(1, batch)
        # kill after a random amount of progress, or at a random moment of start-up work
        if rng.random() < 0.8:
            wait_until(functools.partial(_progressed, run, wanted), 30, interval_s=0.005)
        run.kill()
        in_flight_at_kills.append(_in_flight(run, names))
    run.start()
    wait_until(lambda: run.queued_files() == 0, 120)
    assert run.stop() == 0

    replies = run.replies()
    per_message: dict[str, int] = defaultdict(int)
    order: dict[str, list[int]] = defaultdict(list)
    for reply in replies:
        per_message[reply["messageId"]] += 1
        if per_message[reply["messageId"]] == 1:
            order[reply["conversationId"]].append(int(reply["messageId"].split("-")[1]))
    assert set(per_message) == set(names.values()), "every message is answered"
    for conversation, seqs in order.items():
        assert seqs == sorted(seqs), f"replies of {conversation} out of order"
    duplicated = {m for m, count in per_message.items() if count > 1}
    extra = sum(count - 1 for count in per_message.values())
    ever_in_flight = set().union(*in_flight_at_kills)
    assert duplicated <= ever_in_flight, "only work interrupted by a kill may be answered twice"
    assert extra <= sum(len(s) for s in in_flight_at_kills)
    assert not list(run.home.failed.glob("*.json")), "nothing was dead-lettered"
    assert sum(1 for s in in_flight_at_kills if s) >= KILLS // 2, "the kills hit work in flight"
