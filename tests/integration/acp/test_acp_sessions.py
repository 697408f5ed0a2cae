"""Several sessions in one conversation with live (`transport: acp`) providers, the fake adapters and the real ones:
`/new` opens a new ACP session (`session/new`), `/resume 1` continues the first one, loaded again (`session/load`)
once the pool let it go."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.home import Home
from orchestrator.agents.conversations import ConversationSessions
from orchestrator.agents.providers import ProviderRunner
from orchestrator.agents.request import TurnRequest
from tests.fakes.acp.helpers import CONV, Harness, any_alive, fake_provider, real_provider
from tests.fakes.acp.scripted_model import ScriptedModel
from tests.fakes.orchestrator import API_PREFIX, isolate_real_cli
from tests.fakes.stores import file_history, file_sessions
from tests.integration.acp.test_acp_pool import LIKES, make  # noqa: F401  (a fixture)

REAL_KEY = "SWITCHYARD_REAL_ACP_TEST_KEY"


@pytest.mark.parametrize("like", LIKES)
async def test_new_opens_a_new_live_session_and_resume_loads_the_first(
        make: Callable[..., Harness], home: Home, like: str) -> None:  # noqa: F811
    # max_live 1: the second session's opening lets the first go, so `/resume 1` must load it again
    h = make(providers={"agent": fake_provider(like, max_live=1)}, minute_sec=0.001)
    sessions = file_sessions(home)
    chat = ConversationSessions(sessions, file_history(home))

    def stored() -> str | None:
        """The ACP session id the conversation's current session keeps."""
        return sessions.session("agent@acp", sessions.current(CONV), assigns_ids=False).id

    try:
        await h.turn("agent", "remember the word zebra")
        first = stored()
        assert chat.answer("/new", "/new", CONV).startswith("Started session 2")
        assert await h.turn("agent", "which word? [recall=zebra]") == "recall zebra: no"
        second = stored()
        assert chat.answer("/resume", "/resume 1", CONV).startswith("Back to session 1")
        assert await h.turn("agent", "which word? [recall=zebra]") == "recall zebra: yes"
        assert stored() == first, "the first session itself, loaded again"
    finally:
        await h.close()
    assert first and second and second != first
    opened = sorted(path.stem for path in h.state.glob("*.json"))
    assert opened == sorted([first, second]), "two ACP sessions were opened (session/new), none seeded anew"


@pytest.mark.parametrize("like", sorted(API_PREFIX))
async def test_with_the_real_adapters_new_starts_afresh_and_resume_1_remembers(
        home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, like: str) -> None:
    """The same with claude-agent-acp, codex-acp and `gemini --acp` against the scripted model: what the adapter
    sends the model after `/new` holds none of the first session, after `/resume 1` it does (the model answers
    `recall …` from the request it got)."""
    isolate_real_cli(tmp_path, monkeypatch, REAL_KEY, f"sk-real-acp-{like}")
    sessions = file_sessions(home)
    chat = ConversationSessions(sessions, file_history(home))
    async with ScriptedModel() as model:
        provider = real_provider(like, model.url, REAL_KEY, max_live=1)
        runner = ProviderRunner(home, {"agent": provider}, {}, sessions=file_sessions(home))

        async def turn(prompt: str) -> str:
            return (await runner.run("agent", TurnRequest(prompt, tmp_path / "ws", conversation=CONV))).stdout

        try:
            await turn("remember the word zebra, then say ok")
            first = sessions.session("agent@acp", CONV, assigns_ids=False).id
            chat.answer("/new", "/new", CONV)
            after_new = await turn("which word? [recall=zebra]")
            chat.answer("/resume", "/resume 1", CONV)
            resumed = await turn("which word now? [recall=zebra]")
            again = sessions.session("agent@acp", sessions.current(CONV), assigns_ids=False).id
            pids = [agent.pid for agent in (runner.acp.pool.agents() if runner.acp.pool else []) if agent.pid]
        finally:
            await runner.close()
    assert after_new.startswith("recall zebra: no"), after_new
    assert resumed.startswith("recall zebra: yes"), resumed
    if like != "gemini":  # gemini cannot load a session in the clock minute it was created (FINDINGS.md): the
        # first session's kept turns seed a new one instead, which is what brought "zebra" back above
        assert first and again == first, "the first ACP session itself was loaded again"
    assert any_alive(pids) == []
