"""Runs reserved here and held in hand (orchestrator/execution/claims.py) on a database shared by hosts: claimed when a
slot frees, oldest first, without reading the queue again; a cancel another process asks for one still
waiting for a slot ends it cancelled before it runs, and its waiting message is told."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psycopg
import pytest

from gateway.home import Home
from gateway.testing import async_wait_until
from tests.backends.postgres.test_run_writes import pg_orchestrator
from tests.fakes.orchestrator import make_message

CHAT = {"selector": {"provider": "rules"}, "diagnostics": {"provider": "rules"}, "reply_within_sec": 60,
        "agents": {"helper": {"provider": "gated", "prompt": "{{message}}"}},
        "workflows": {"chat": {"description": "Answers", "steps": [{"id": "Reply", "agent": "helper"}]}},
        "rules": {"default_workflow": "chat"}}


class Gated:
    """An agent that answers each prompt only once the test opens the gate; records the order it started."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.started: list[str] = []

    async def __call__(self, prompt: str, request: dict[str, Any]) -> str:
        self.started.append(prompt.strip())
        await self.gate.wait()
        return f"answered: {prompt.strip()}"


def _orchestrator(tmp_path: Path, db: str, monkeypatch: pytest.MonkeyPatch, agent: Gated) -> Any:
    return pg_orchestrator(tmp_path, db, monkeypatch, CHAT, providers={"gated": agent}, max_parallel_runs=1)


async def _one_running_one_waiting(orchestrator: Any, agent: Gated) -> tuple[asyncio.Task[Any], asyncio.Task[Any], str]:
    """`busy` holds the only slot (its agent waits at the gate); `later`'s run waits in hand: both messages'
    tasks, and the waiting run's id."""
    busy = asyncio.create_task(orchestrator.handle(make_message("busy", conversationId="c1")))
    await async_wait_until(lambda: agent.started == ["busy"], timeout_s=10)
    waiting = asyncio.create_task(orchestrator.handle(make_message("later", conversationId="c2")))
    await async_wait_until(lambda: len(orchestrator._executor._claims.reserved) == 1, timeout_s=10)
    [run_id] = orchestrator._executor._claims.reserved
    return busy, waiting, run_id


async def test_runs_waiting_for_a_slot_run_oldest_first_and_each_message_gets_its_own_answer(
        tmp_path: Path, db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    agent = Gated()
    orchestrator = _orchestrator(tmp_path, db, monkeypatch, agent)
    await orchestrator.start()
    try:
        texts = ["first", "second", "third", "fourth"]
        handled = []
        for index, text in enumerate(texts):  # each message's run is created before the next message's
            handled.append(asyncio.create_task(orchestrator.handle(make_message(text, conversationId=f"c{index}"))))
            await async_wait_until(lambda n=index: len(agent.started) + len(orchestrator._executor._claims.reserved)
                                   == n + 1, timeout_s=10)
        assert agent.started == ["first"]  # one slot: the others wait
        agent.gate.set()
        replies = await asyncio.wait_for(asyncio.gather(*handled), timeout=30)
    finally:
        await orchestrator.stop()
    assert agent.started == texts
    assert [reply.message for [reply] in replies] == [f"answered: {text}" for text in texts]


async def test_a_cancel_asked_elsewhere_for_a_run_waiting_for_a_slot_ends_it_before_it_runs(
        tmp_path: Path, db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.storage.postgres.runs import PgRunStore

    agent = Gated()
    orchestrator = _orchestrator(tmp_path, db, monkeypatch, agent)
    await orchestrator.start()
    try:
        busy, waiting, run_id = await _one_running_one_waiting(orchestrator, agent)
        other_home = Home(tmp_path / "b")
        other_home.create()
        PgRunStore(other_home, db, fsync=False).request_cancel(run_id)  # as another host's /cancel does
        [reply] = await asyncio.wait_for(waiting, timeout=30)
        assert agent.started == ["busy"]  # it never ran
        agent.gate.set()
        await asyncio.wait_for(busy, timeout=30)
    finally:
        await orchestrator.stop()
    assert run_id in reply.message and "cancel" in reply.message.lower()
    assert orchestrator._store.load(run_id).state == "cancelled"


async def test_a_message_whose_reserved_run_another_host_took_over_learns_it_ended_there(
        tmp_path: Path, db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run held in hand whose lock this process lost (the database away longer than the lock's TTL) and
    another host took: the claim fails, the reservation is dropped, and the waiting message goes back to
    reading the store, where it finds the run that host ended and pushed (nothing more to reply)."""
    from gateway.backends.postgres.locks import PgLocks
    from orchestrator.execution.claims import job_lock
    from orchestrator.storage.postgres.runs import PgRunStore

    agent = Gated()
    orchestrator = _orchestrator(tmp_path, db, monkeypatch, agent)
    await orchestrator.start()
    claims = orchestrator._executor._claims
    try:
        busy, waiting, run_id = await _one_running_one_waiting(orchestrator, agent)
        monkeypatch.setattr(claims, "_hand_sec", 0.0)  # as if reserved long ago: claimed through the lock
        other = PgLocks(db, holder="elsewhere:1:1", ttl_s=600)
        with psycopg.connect(db, autocommit=True) as conn:  # its lock expired meanwhile
            conn.execute("UPDATE switchyard_locks SET expires_at = now() - interval '1 second' WHERE resource = %s",
                         (job_lock(run_id),))
        assert other.acquire(job_lock(run_id))
        elsewhere = PgRunStore(Home(tmp_path / "b"), db, fsync=False)
        run = elsewhere.load(run_id)
        assert run is not None and run.state == "queued"
        agent.gate.set()  # the slot frees: the claim of the run in hand is refused
        await async_wait_until(lambda: not claims.reserved, timeout_s=10)
        assert agent.started == ["busy"]
        elsewhere.save(run.model_copy(update={"state": "done", "delivery": "push"}))  # that host ran and pushed it
        assert await asyncio.wait_for(waiting, timeout=10) == []
        await asyncio.wait_for(busy, timeout=10)
    finally:
        await orchestrator.stop()

