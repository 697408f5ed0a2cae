"""The REAL ACP adapters' sessions over their life, against the scripted model on 127.0.0.1: every turn asks for
the configured model (new, reloaded after /stop, eviction, a killed adapter, a gateway restart), and an adapter
holds no more sessions open than `max_live` allows however many conversations came and went (FINDINGS.md,
"Models and closing sessions"). Skipped where an adapter is not installed, as test_acp_real_adapters.py."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from gateway.home import Home
from gateway.settings import ProviderSettings
from gateway.telemetry.events import EventLog
from gateway.testing import async_wait_until
from orchestrator.agents.acp.pool import AcpPool
from orchestrator.agents.live import PermissionAsker, ToolApproval, TurnStopped
from orchestrator.agents.providers import ProviderRunner
from orchestrator.agents.request import TurnRequest
from tests.fakes.acp.helpers import ADAPTER, CONV, any_alive, kill9, real_provider
from tests.fakes.acp.procs import live_children, open_files
from tests.fakes.acp.scripted_model import Call, ScriptedModel
from tests.fakes.orchestrator import API_PREFIX as PREFIX
from tests.fakes.orchestrator import isolate_real_cli
from tests.fakes.stores import file_sessions

KEY_VARIABLE = "SWITCHYARD_REAL_ACP_TEST_KEY"
MODEL = {"claude": "claude-sonnet-4-5", "codex": "gpt-5.2", "gemini": "gemini-2.5-pro"}
"""A model no adapter starts a session on by itself: claude-agent-acp starts each on `default` (Opus), codex-acp
on its config's (none here: gpt-5.5), `gemini --acp` without `--model` on `auto`."""
MAX_LIVE = 2
CONVERSATIONS = 8
MODE = {"claude": "default", "codex": "read-only", "gemini": "default"}  # each adapter's mode of a new session
OPEN_AT_MOST = {"claude": MAX_LIVE, "codex": MAX_LIVE, "gemini": 2 * MAX_LIVE - 1}
"""codex and claude close what the pool lets go; gemini cannot, and a shared process is retired once it has
hosted max_live such sessions: it holds at most max_live - 1 of them beside its live ones."""


def asked_model(call: Call) -> str:
    """The model a request asked for: in the body (Anthropic, Responses) or the path (Gemini)."""
    if call.api == "gemini":
        return call.path.rsplit("/", 1)[-1].split(":")[0]
    return str(call.body.get("model"))


class Chat:
    """A runner over one home and provider, restartable (a new runner, as after a gateway restart)."""

    def __init__(self, home: Home, events: EventLog, provider: ProviderSettings, cwd: Path):
        self.home, self.events, self.provider, self.cwd = home, events, provider, cwd
        self.runner = self._runner()

    def _runner(self) -> ProviderRunner:
        return ProviderRunner(self.home, {"agent": self.provider}, {}, events=self.events,
                              sessions=file_sessions(self.home))

    async def turn(self, prompt: str, conversation: str = CONV, ask: PermissionAsker | None = None,
                   on_text: object = None) -> str:
        turn = TurnRequest(prompt, self.cwd, conversation=conversation, ask=ask, on_text=on_text)  # type: ignore[arg-type]
        result = await self.runner.run("agent", turn)
        return result.stdout

    @property
    def pool(self) -> AcpPool:
        assert self.runner.acp.pool is not None
        return self.runner.acp.pool

    def pids(self) -> list[int]:
        return [agent.pid for agent in self.pool.agents() if agent.pid is not None]

    async def restart(self) -> None:
        await self.runner.close()
        self.runner = self._runner()


@pytest.mark.parametrize("like", sorted(PREFIX))
async def test_every_live_turn_asks_for_the_configured_model(
    home: Home, events: EventLog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, like: str,
) -> None:
    isolate_real_cli(tmp_path, monkeypatch, KEY_VARIABLE, f"sk-real-acp-{like}")
    command = {"gemini": [str(ADAPTER["gemini"]), "--acp"]}  # no --model: the session must be put on it
    async with ScriptedModel() as model:
        provider = real_provider(like, model.url, KEY_VARIABLE, model=MODEL[like], max_live=1,
                                 **({"acp_command": command[like]} if like in command else {}))
        chat = Chat(home, events, provider, tmp_path / "ws")
        asked: dict[str, set[str]] = {}
        seen: list[str] = []

        async def step(name: str, prompt: str, conversation: str = CONV) -> str:
            first = len(model.calls)
            answer = await chat.turn(prompt, conversation)
            asked[name] = {asked_model(call) for call in model.calls[first:]}
            return answer

        pids: list[int] = []
        running: asyncio.Task[str] | None = None
        try:
            await step("first turn", "remember the word zebra, then say ok")
            running = asyncio.create_task(chat.turn("a long answer [chunks=60] [delay=0.1]", on_text=seen.append))
            await async_wait_until(lambda: seen, timeout_s=60)
            await chat.runner.turns.stop(CONV)
            with pytest.raises(TurnStopped):
                await running
            await step("after /stop", "after the stop")
            await step("another conversation", "hello", "conv:console/main/other")  # max_live 1: CONV is evicted
            await step("after eviction", "back again [recall=zebra]")
            for pid in chat.pids():
                kill9(pid)
            await step("after the adapter was killed", "after the kill")
            await chat.restart()
            recalled = await step("after a restart", "which word did I ask you to remember? [recall=zebra]")
            pids = chat.pids()
        finally:
            await _ended(running)
            await chat.runner.close()
    assert asked == {name: {MODEL[like]} for name in asked}, asked
    assert recalled.startswith("recall zebra: yes"), recalled
    assert any_alive(pids) == []


@pytest.mark.parametrize("like", sorted(PREFIX))
async def test_an_adapter_holds_no_more_sessions_than_max_live_allows(
    home: Home, events: EventLog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, like: str,
) -> None:
    isolate_real_cli(tmp_path, monkeypatch, KEY_VARIABLE, f"sk-real-acp-{like}")
    conversations = [f"conv:console/main/n{n}" for n in range(CONVERSATIONS if like != "claude" else MAX_LIVE + 2)]
    async with ScriptedModel() as model:
        chat = Chat(home, events, real_provider(like, model.url, KEY_VARIABLE, max_live=MAX_LIVE), tmp_path / "ws")
        try:
            await chat.turn("remember the word zebra, then say ok", conversations[0])
            first = chat.pids()
            for conversation in conversations[1:]:
                await chat.turn("hello", conversation)
            stored = file_sessions(home)
            ids = [stored.session("agent@acp", conversation, assigns_ids=False).id for conversation in conversations]
            held = await _held_open(chat.pool, [i for i in ids if i], MODE[like])
            running, known = live_children(os.getpid()), chat.pids()
            rollouts = [path for pid in known for path in open_files(pid, "/rollout-")]
            recalled = await chat.turn("which word did I ask you to remember? [recall=zebra]", conversations[0])
        finally:
            await chat.runner.close()
    assert len(held) <= OPEN_AT_MOST[like], (len(held), len(conversations))
    assert sorted(running) == sorted(known)  # no adapter process runs that the pool does not know
    assert len(known) == (1 if like != "claude" else len(held))
    assert not set(first) & set(running)  # replaced: a closed session keeps much of its memory in codex-acp
    assert len(rollouts) <= MAX_LIVE, rollouts  # codex's rollout files (none for the others)
    assert recalled.startswith("recall zebra: yes"), recalled  # the evicted conversation comes back


async def test_a_crowded_gemini_process_is_retired_without_losing_a_running_turn(
    home: Home, events: EventLog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    isolate_real_cli(tmp_path, monkeypatch, KEY_VARIABLE, "sk-real-acp-gemini")
    waiting, release = asyncio.Event(), asyncio.Event()

    async def hold(approval: ToolApproval) -> str | None:
        waiting.set()
        await release.wait()
        return next(o.id for o in approval.options if o.kind == "allow_once")

    async with ScriptedModel() as model:
        chat = Chat(home, events, real_provider("gemini", model.url, KEY_VARIABLE, max_live=MAX_LIVE),
                    tmp_path / "ws")
        running: asyncio.Task[str] | None = None
        try:
            running = asyncio.create_task(chat.turn("run it [run=echo still-here > kept.txt]", ask=hold))
            await async_wait_until(waiting.is_set, timeout_s=60)
            [first] = chat.pids()
            for n in range(2 * MAX_LIVE):  # the first process is crowded: a fresh one takes the new sessions
                await chat.turn("hello", f"conv:console/main/n{n}")
            kept_while_running = sorted(chat.pids())
            release.set()
            answer = await running
            after = chat.pids()
        finally:
            release.set()
            await _ended(running)
            await chat.runner.close()
    assert first in kept_while_running and len(kept_while_running) == 2
    assert "tool said" in answer and (tmp_path / "ws" / "kept.txt").read_text().strip() == "still-here"
    assert first not in after and any_alive([first]) == []  # stopped once its last turn ended (its conversation
    # loads again when next used, as the evicted ones of the test above)


async def _held_open(pool: AcpPool, session_ids: list[str], mode: str) -> list[str]:
    """The sessions some adapter process of the pool holds open: an adapter answers `session/set_mode` (to the
    mode the session is in already) for a session it holds, and "not found" for one it does not."""
    held = []
    for agent in pool.agents():
        assert agent.conn is not None
        for session_id in session_ids:
            try:
                await agent.conn.send_request("session/set_mode", {"sessionId": session_id, "modeId": mode})
            except Exception:
                continue
            held.append(session_id)
    return held


async def _ended(task: asyncio.Task[str] | None) -> None:
    """A turn a failing test left running is cancelled and awaited (not left to the event loop's teardown)."""
    if task is not None and not task.done():
        task.cancel()
    if task is not None:
        await asyncio.gather(task, return_exceptions=True)
