"""Workflow runs through a database outage: a `run` host and a `worker` host on a server of the test's own,
a burst of chat runs over many conversations, the server restarted (or every connection terminated) while
runs are between their step and their final write. Every message must get its run's result exactly once —
as its reply, or pushed after the acknowledgement — and no run may stay `running` for good."""

from __future__ import annotations

import contextlib
import random
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest

from gateway.testing import wait_until
from tests.backends.postgres.helpers import rows
from tests.backends.postgres.throwaway import ThrowawayServer
from tests.faults.harness import GatewayRun, message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]

PROVIDER = str(Path(__file__).with_name("step_provider.py"))
ORCHESTRATOR = {
    "selector": {"provider": "rules"}, "diagnostics": {"provider": "rules"}, "reply_within_sec": 2,
    "agents": {"helper": {"provider": "step", "prompt": "{{message}}"}},
    "workflows": {"chat": {"description": "Answer", "steps": [{"id": "Answer", "agent": "helper"}]}},
    "rules": {"default_workflow": "chat"}}
MESSAGES, CONVERSATIONS = 200, 20
KILLS = 12
FINAL = ("done", "failed_final", "cancelled")


class Host(GatewayRun):
    """`switchyard run` or `switchyard worker` on its own home, on the test's database."""

    def __init__(self, root: Path, dsn: str, steps: Path, role: str):
        super().__init__(root, env={"SWITCHYARD_DSN": dsn})
        self.role = role
        self.steps = steps

    def command(self) -> list[str]:
        return [sys.executable, "-m", "gateway.cli", "--home", str(self.home.root), self.role]

    def setup(self) -> Host:
        env = {"STEP_LOG": str(self.steps), "GATE": str(self.steps) + ".gate", "GATE_STEP": "none"}
        self.configure(queue={"backend": "postgres", "fsync": False, "lease_sec": 2, "lock_ttl_sec": 3,
                              "max_concurrency": 4},
                       providers={"step": {"command": [sys.executable, PROVIDER], "env": env, "timeout_sec": 60}},
                       orchestrator=ORCHESTRATOR)
        return self


def results(dsn: str) -> list[tuple[str, str]]:
    """(messageId, runState) of every reply carrying a run's final result, the waiting reply or a push."""
    try:
        found = rows(dsn, "SELECT payload->>'messageId', payload->>'runState' FROM switchyard_outbox "
                          f"WHERE payload->>'runState' IN {FINAL}")
    except psycopg.OperationalError:
        return []
    return [(str(message_id), str(state)) for message_id, state in found]


def where_they_are(dsn: str, ids: list[str]) -> str:
    """What the database holds of each message that got no final result: its queue row, its runs, its replies."""
    lines = []
    for message_id in ids:
        pattern = f"%{message_id}%"
        queued = rows(dsn, "SELECT name, state, attempts, reason, errors::text FROM switchyard_messages "
                           "WHERE name LIKE %s", pattern)
        runs = rows(dsn, "SELECT run_id, state, delivered FROM switchyard_runs WHERE data::text LIKE %s",
                    pattern)
        replies = rows(dsn, "SELECT name, state, payload->>'runState' FROM switchyard_outbox "
                            "WHERE payload->>'messageId' = %s", message_id)
        lines.append(f"{message_id}: queue {queued} runs {runs} replies {replies}")
    return "\n".join(lines)


def steps_done(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def burst(hosts: list[Host]) -> list[str]:
    ids = []
    for seq in range(MESSAGES):
        payload = message(seq, f"c{seq % CONVERSATIONS}")
        hosts[seq % len(hosts)].drop(payload)
        ids.append(payload.messageId)
    return ids


def assert_each_answered_once(dsn: str, ids: list[str], hosts: list[Host]) -> None:
    """Every message has exactly one final result and no run is left unfinished."""
    try:
        with contextlib.suppress(AssertionError):  # what is missing is said below
            wait_until(lambda: len({m for m, _ in results(dsn)}) == len(ids), 240)
    finally:
        for host in hosts:
            host.stop()
    counts = Counter(message_id for message_id, _ in results(dsn))
    missing = sorted(set(ids) - set(counts))
    assert not missing, f"never answered: {missing[:10]}\n{where_they_are(dsn, missing[:10])}"
    assert max(counts.values()) == 1, f"answered twice: {[m for m, n in counts.items() if n > 1][:10]}"
    assert {state for _, state in results(dsn)} == {"done"}
    stuck = rows(dsn, f"SELECT run_id, state FROM switchyard_runs WHERE state NOT IN {FINAL}")
    assert stuck == [], f"runs left unfinished: {stuck[:10]}"


def two_hosts(tmp_path: Path, dsn: str) -> tuple[list[Host], Path]:
    steps = tmp_path / "steps.jsonl"
    hosts = [Host(tmp_path / "a", dsn, steps, "run").setup(), Host(tmp_path / "b", dsn, steps, "worker").setup()]
    for host in hosts:
        host.start()
    return hosts, steps


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_a_database_restart_mid_burst_answers_every_run_once(tmp_path: Path, throwaway_pg: ThrowawayServer,
                                                             mode: str) -> None:
    dsn = throwaway_pg.dsn
    hosts, steps = two_hosts(tmp_path, dsn)
    ids = burst(hosts)
    wait_until(lambda: steps_done(steps) >= MESSAGES // 4, 120)
    throwaway_pg.restart(mode)
    assert_each_answered_once(dsn, ids, hosts)


def test_connections_terminated_at_random_answer_every_run_once(tmp_path: Path,
                                                                throwaway_pg: ThrowawayServer) -> None:
    """Every client connection of the server is ended (pg_terminate_backend) at KILLS random moments of
    the burst, between a run's step and its final write among them."""
    dsn = throwaway_pg.dsn
    hosts, steps = two_hosts(tmp_path, dsn)
    ids = burst(hosts)
    chance = random.Random(0x5EED)
    wait_until(lambda: steps_done(steps) >= MESSAGES // 10, 120)
    ended = 0
    for _ in range(KILLS):
        progress = steps_done(steps)
        wait_until(lambda: steps_done(steps) > progress + chance.randrange(1, 8), 120)  # noqa: B023
        with psycopg.connect(dsn, autocommit=True) as conn:
            row: Any = conn.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
                                    "pid <> pg_backend_pid() AND backend_type = 'client backend'").fetchone()
            ended += int(row[0])
    assert ended >= KILLS, "no connection was ended"
    assert_each_answered_once(dsn, ids, hosts)
