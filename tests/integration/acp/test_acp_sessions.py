"""Several sessions in one conversation with live (`transport: acp`) providers and the fake adapters: `/new` opens
a new ACP session (`session/new`), `/resume 1` continues the first one, loaded again (`session/load`) once the
pool let it go."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gateway.home import Home
from orchestrator.agents.conversations import ConversationSessions
from tests.fakes.acp.helpers import CONV, Harness, fake_provider
from tests.fakes.stores import file_history, file_sessions
from tests.integration.acp.test_acp_pool import LIKES, make  # noqa: F401  (a fixture)


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
