"""Live sessions over ACP (orchestrator/agents/acp) with the fake adapters: memory, streaming, approvals, the
pool's limits, lost sessions coming back, /stop, and no agent process or secret left where it must not be."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.home import Home
from gateway.testing import async_wait_until
from orchestrator.agents.live import ToolApproval, TurnStopped
from orchestrator.agents.spawn import ProviderFailed
from tests.fakes.acp.helpers import CONV, Harness, any_alive, fake_provider, kill9, kill_left

LIKES = ["claude", "codex", "gemini"]


@pytest.fixture
async def make(home: Home, tmp_path: Path) -> AsyncIterator[Callable[..., Harness]]:
    made: list[Harness] = []

    def build(**kwargs: Any) -> Harness:
        harness = Harness(home, tmp_path, **kwargs)
        made.append(harness)
        return harness

    yield build
    for harness in made:  # a failing test leaves no agent behind either
        await harness.close()
        kill_left(harness.agent_pids())


@pytest.mark.parametrize("like", LIKES)
async def test_a_session_remembers_earlier_turns(make, like: str) -> None:
    h = make(providers={"agent": fake_provider(like)})
    try:
        first = await h.turn("agent", "remember the word zebra")
        second = await h.turn("agent", "which word? [recall=zebra]")
        other = await h.turn("agent", "and here? [recall=zebra]", conversation="conv:console/main/c2")
    finally:
        await h.close()
    assert first == "answer to: remember the word zebra (0 earlier)"
    assert second == "recall zebra: yes"
    assert other == "recall zebra: no"  # another conversation, another session


@pytest.mark.parametrize("like", LIKES)
async def test_chunks_reach_on_text_as_the_answer_grows(make, like: str) -> None:
    h = make(providers={"agent": fake_provider(like)})
    seen: list[str] = []
    try:
        answer = await h.turn("agent", "stream it [chunks=5]", on_text=seen.append)
    finally:
        await h.close()
    assert len(seen) == 5
    assert all(later.startswith(earlier) for earlier, later in zip(seen, seen[1:], strict=False))
    assert seen[-1] == answer == "answer to: stream it (0 earlier)"


@pytest.mark.parametrize("like", LIKES)
async def test_an_allowed_tool_call_runs(make, like: str) -> None:
    h = make(providers={"agent": fake_provider(like)})
    asked: list[ToolApproval] = []

    async def allow(approval: ToolApproval) -> str | None:
        asked.append(approval)
        return next(o.id for o in approval.options if o.kind == "allow_once")

    try:
        answer = await h.turn("agent", "do it [run=touch x]", ask=allow)
    finally:
        await h.close()
    assert answer == "ran touch x"
    assert [a.title for a in asked] == ["touch x"]
    assert {o.kind for o in asked[0].options} == {"allow_once", "allow_always", "reject_once"}


@pytest.mark.parametrize("like", LIKES)
async def test_a_denied_tool_call_does_not_run_and_the_answer_says_so(make, like: str) -> None:
    h = make(providers={"agent": fake_provider(like)})

    async def nobody(approval: ToolApproval) -> str | None:
        return None  # expired / nobody may answer

    try:
        denied = await h.turn("agent", "do it [run=touch x]", ask=nobody)
        without_asker = await h.turn("agent", "again [run=touch y]")
        after = await h.turn("agent", "still there? [recall=zebra]")
    finally:
        await h.close()
    if like == "codex":  # codex ends a rejected turn `cancelled` with no text: the gateway says it
        assert denied == "The tool call was denied: touch x."
        assert without_asker == "The tool call was denied: touch y."
    else:
        assert denied == "User refused permission to run touch x"
        assert without_asker == "User refused permission to run touch y"
    assert after == "recall zebra: no"  # the session goes on


async def test_permissions_allow_runs_tools_without_asking(make) -> None:
    h = make(providers={"agent": fake_provider("codex", permissions="allow")})

    async def never(approval: ToolApproval) -> str | None:
        raise AssertionError("asked")

    try:
        assert await h.turn("agent", "do it [run=ls]", ask=never) == "ran ls"
    finally:
        await h.close()


@pytest.mark.parametrize("like", LIKES)
async def test_an_evicted_session_comes_back_with_its_memory(make, like: str) -> None:
    h = make(providers={"agent": fake_provider(like, max_live=1)}, minute_sec=0.001)
    try:
        await h.turn("agent", "remember the word zebra")
        first_pids = h.live_pids()
        await h.turn("agent", "hello", conversation="conv:console/main/c2")  # evicts the first session
        assert h.runner.acp.pool is not None and h.runner.acp.pool.live_count("agent") == 1
        if like == "claude":  # a process per session: the evicted one's is gone
            assert not any_alive(first_pids)
        back = await h.turn("agent", "which word? [recall=zebra]")
    finally:
        await h.close()
    assert back == "recall zebra: yes"


@pytest.mark.parametrize("like", LIKES)
async def test_a_killed_agent_is_replaced_and_the_session_remembers(make, like: str) -> None:
    # gemini's load fails in its creation minute (here: always), so its session comes back seeded
    h = make(providers={"agent": fake_provider(like)}, minute_sec=3600 if like == "gemini" else 0.001)
    try:
        await h.turn("agent", "remember the word zebra")
        [pid] = h.live_pids()
        kill9(pid)
        await async_wait_until(lambda: not any_alive([pid]))
        back = await h.turn("agent", "which word? [recall=zebra]")
        assert h.live_pids() != [pid]
    finally:
        await h.close()
    assert back == "recall zebra: yes"


@pytest.mark.parametrize("like", ["claude", "codex"])
async def test_max_live_is_enforced(make, like: str) -> None:
    h = make(providers={"agent": fake_provider(like, max_live=2)})
    try:
        for n in range(4):
            await h.turn("agent", f"turn {n}", conversation=f"conv:console/main/c{n}")
            assert h.runner.acp.pool is not None and h.runner.acp.pool.live_count("agent") <= 2
        processes = len(any_alive(h.agent_pids()))
    finally:
        await h.close()
    assert processes == (2 if like == "claude" else 1)


async def test_an_idle_session_is_closed(make) -> None:
    h = make(providers={"agent": fake_provider("claude", idle_sec=0.3)})
    try:
        await h.turn("agent", "remember the word zebra")
        pids = h.live_pids()
        await async_wait_until(lambda: not any_alive(pids), timeout_s=10)
        assert h.runner.acp.pool is not None and h.runner.acp.pool.live_count("agent") == 0
        assert await h.turn("agent", "[recall=zebra]") == "recall zebra: yes"  # loaded again
    finally:
        await h.close()


async def test_close_leaves_no_process_behind(make) -> None:
    h = make(providers={name: fake_provider(name) for name in LIKES})
    for name in LIKES:
        await h.turn(name, "hello")
        await h.turn(name, "hello", conversation="conv:console/main/c2")
    started = h.agent_pids()
    assert len(started) == 4  # claude x2, codex, gemini
    await h.close()
    assert any_alive(started) == []  # codex's child in its group too


async def test_no_secret_reaches_the_agent(make, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOT_TOKEN_FOR_TEST", "secret-token-value")
    monkeypatch.setenv("SWITCHYARD_INTERNAL_FOR_TEST", "internal")
    h = make(providers={"agent": fake_provider("codex", env={"MY_SETTING": "visible"})},
             secret_env=frozenset({"BOT_TOKEN_FOR_TEST"}))
    try:
        env = json.loads(await h.turn("agent", "[env]"))
    finally:
        await h.close()
    assert "BOT_TOKEN_FOR_TEST" not in env and "secret-token-value" not in json.dumps(env)
    assert "SWITCHYARD_INTERNAL_FOR_TEST" not in env
    assert env["MY_SETTING"] == "visible"


@pytest.mark.parametrize("like", LIKES)
async def test_stop_ends_the_turn_and_the_next_turn_answers_normally(make, like: str) -> None:
    h = make(providers={"agent": fake_provider(like)})
    seen: list[str] = []
    try:
        running = asyncio.create_task(h.turn("agent", "a long one [chunks=50] [delay=0.2]", on_text=seen.append))
        await async_wait_until(lambda: seen)
        assert await h.runner.turns.stop(CONV) == 1
        with pytest.raises(TurnStopped):
            await running
        after = await h.turn("agent", "after the stop")
        later = await h.turn("agent", "and then")
    finally:
        await h.close()
    assert after.startswith("answer to: after the stop")  # claude's post-cancel empty answer is not shown
    assert later.startswith("answer to: and then")


async def test_stop_kills_an_agent_that_ignores_the_cancel(make) -> None:
    h = make(providers={"agent": fake_provider("codex")})
    seen: list[str] = []
    try:
        await h.turn("agent", "remember the word zebra")
        [pid] = h.live_pids()
        running = asyncio.create_task(h.turn("agent", "[chunks=50] [delay=0.2] [deaf]", on_text=seen.append))
        await async_wait_until(lambda: seen)
        await h.runner.turns.stop(CONV)  # session/cancel, ~3 s, then the group is killed
        with pytest.raises(TurnStopped):
            await running
        assert not any_alive([pid])
        assert await h.turn("agent", "[recall=zebra]") == "recall zebra: yes"  # a new process loads it
    finally:
        await h.close()


async def test_stop_answers_a_pending_approval_as_cancelled(make) -> None:
    h = make(providers={"agent": fake_provider("claude")})
    asked = asyncio.Event()

    async def wait_forever(approval: ToolApproval) -> str | None:
        asked.set()
        await asyncio.Event().wait()
        return None

    try:
        running = asyncio.create_task(h.turn("agent", "[run=rm -rf x]", ask=wait_forever))
        await asked.wait()
        await h.runner.turns.stop(CONV)
        with pytest.raises(TurnStopped):
            await running
        assert (await h.turn("agent", "next")).startswith("answer to: next")
    finally:
        await h.close()


@pytest.mark.parametrize("like", ["codex", "gemini"])
async def test_a_stateless_call_gets_a_one_off_session_in_the_warm_process(make, like: str) -> None:
    h = make(providers={"agent": fake_provider(like, idle_sec=0.5)})
    try:
        first = await h.turn("agent", "remember the word zebra", conversation=None)
        second = await h.turn("agent", "[recall=zebra]", conversation=None)
        assert h.runner.acp.pool is not None and h.runner.acp.pool.live_count("agent") == 0
        started = h.agent_pids()
        assert len(started) == 1  # both calls ran in the one warm process
        await async_wait_until(lambda: not any_alive(started), timeout_s=10)  # stopped once idle
    finally:
        await h.close()
    assert first == "answer to: remember the word zebra (0 earlier)"
    assert second == "recall zebra: no"  # no memory between stateless calls


async def test_a_session_the_adapter_will_not_create_fails_the_turn_and_leaves_no_process(make) -> None:
    h = make(providers={"agent": fake_provider("claude")})
    h.env["FAKE_ACP_FAIL_NEW"] = "1"
    try:
        with pytest.raises(ProviderFailed, match="Internal error"):
            await h.turn("agent", "hello")
        started = h.agent_pids()
        assert len(started) == 1 and any_alive(started) == []  # stopped at once, not at close
        assert h.runner.acp.fallen_back == {}  # it started: retried later, not one-shot
    finally:
        await h.close()


async def test_a_turn_cut_short_by_close_starts_no_process_afterwards(make) -> None:
    h = make(providers={"agent": fake_provider("gemini")})
    running = asyncio.create_task(h.turn("agent", "a slow start [delay=30]"))
    await async_wait_until(lambda: list(h.state.glob("*.json")), timeout_s=30)  # its session exists
    await h.close()
    with pytest.raises(ProviderFailed):
        await asyncio.wait_for(running, 20)
    assert any_alive(h.agent_pids()) == []


@pytest.mark.parametrize("like", ["codex", "gemini"])
async def test_a_process_crowded_with_sessions_it_cannot_close_is_replaced_after_its_running_turn(
    make, like: str,
) -> None:
    h = make(providers={"agent": fake_provider(like, max_live=2)})  # the fakes do not offer session/close
    asked, release = asyncio.Event(), asyncio.Event()

    async def hold(approval: ToolApproval) -> str | None:
        asked.set()
        await release.wait()
        return next(o.id for o in approval.options if o.kind == "allow_once")

    try:
        await h.turn("agent", "remember the word zebra")
        running = asyncio.create_task(h.turn("agent", "[run=touch kept]", ask=hold))
        await asked.wait()
        [first] = h.live_pids()
        for n in range(6):  # each evicts the one before: the first process holds 2 it let go, a 2nd takes over
            await h.turn("agent", "hello", conversation=f"conv:console/main/n{n}")
        while_running = sorted(h.live_pids())
        release.set()
        answer = await running
        after = h.live_pids()
        recalled = await h.turn("agent", "[recall=zebra]")
    finally:
        release.set()
        await h.close()
    assert first in while_running and len(while_running) == 2
    assert answer == "ran touch kept"
    assert first not in after and not any_alive([first])  # stopped when its last turn ended
    assert len(h.agent_pids()) == 3  # the first, then one per 2 conversations it could not close
    assert recalled == "recall zebra: yes"  # loaded again in the newest process
