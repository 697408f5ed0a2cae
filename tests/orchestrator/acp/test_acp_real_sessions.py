"""The REAL ACP adapters' sessions over their life, against the scripted model on 127.0.0.1: every turn asks for
the configured model (new, reloaded after /stop, eviction, a killed adapter, a gateway restart) (FINDINGS.md,
"Models and closing sessions"). Skipped where an adapter is not installed, as test_acp_real_adapters.py."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.events import EventLog
from gateway.home import Home
from gateway.settings import ProviderSettings
from gateway.testing import async_wait_until
from orchestrator.acp.pool import AcpPool
from orchestrator.agent_cli import AgentCall
from orchestrator.live import PermissionAsker, TurnStopped
from orchestrator.providers import ProviderRunner
from tests.fakes.acp.scripted_model import Call, ScriptedModel
from tests.orchestrator.acp.acp_helpers import ADAPTER, CONV, any_alive, kill9, real_provider
from tests.orchestrator.orch_helpers import API_PREFIX as PREFIX
from tests.orchestrator.orch_helpers import isolate_real_cli

KEY_VARIABLE = "SWITCHYARD_REAL_ACP_TEST_KEY"
MODEL = {"claude": "claude-sonnet-4-5", "codex": "gpt-5.2", "gemini": "gemini-2.5-pro"}
"""A model no adapter starts a session on by itself: claude-agent-acp starts each on `default` (Opus), codex-acp
on its config's (none here: gpt-5.5), `gemini --acp` without `--model` on `auto`."""

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
        return ProviderRunner(self.home, {"agent": self.provider}, {}, events=self.events)

    async def turn(self, prompt: str, conversation: str = CONV, ask: PermissionAsker | None = None,
                   on_text: object = None) -> str:
        call = AgentCall(conversation=conversation, ask=ask, on_text=on_text)  # type: ignore[arg-type]
        result = await self.runner.run("agent", prompt, request={}, request_file=None, cwd=self.cwd, call=call)
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


async def _ended(task: asyncio.Task[str] | None) -> None:
    """A turn a failing test left running is cancelled and awaited (not left to the event loop's teardown)."""
    if task is not None and not task.done():
        task.cancel()
    if task is not None:
        await asyncio.gather(task, return_exceptions=True)
