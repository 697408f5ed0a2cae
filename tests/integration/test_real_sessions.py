"""Several sessions in one conversation with the REAL claude, codex and gemini CLIs against the fake model server
(tests/fakes/model_server.py): after `/new` the CLI sends the model none of the first session's turns, after
`/resume 1` it sends them again — read on the wire, not from our records. Skipped where a CLI is not installed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.api import HandlerContext
from gateway.settings import ProviderSettings
from tests.fakes.model_server import ModelServer
from tests.fakes.orchestrator import API_PREFIX, REMOTE_AGENT_CONFIG, isolate_real_cli, make_message
from tests.integration.test_real_endpoints import KEY_VARIABLE, real_cli

FIRST_WORDS = "my name is Ada Lovelace"


@pytest.mark.parametrize("cli", sorted(API_PREFIX))
async def test_new_then_resume_1_brings_the_first_sessions_memory_back(
    make_context: Callable[..., HandlerContext], write_config: Callable[[str], Path],
    start: Callable[[HandlerContext], Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: str,
) -> None:
    binary = real_cli(cli)
    isolate_real_cli(tmp_path, monkeypatch, KEY_VARIABLE, f"sk-real-{cli}")
    write_config(REMOTE_AGENT_CONFIG)
    async with ModelServer(reply="the fake model answers") as server:
        provider = ProviderSettings(type=cli, binary=binary, base_url=server.url + API_PREFIX[cli],
                                    api_key_env=KEY_VARIABLE, timeout_sec=90, first_output_sec=60)
        orchestrator = await start(make_context({"remote": provider}))

        async def say(text: str) -> tuple[str, list[str]]:
            """The reply, and the bodies of what the CLI sent the model meanwhile."""
            before = len(server.model_calls)
            [answer] = await orchestrator.handle(make_message(text, conversationId="c1"))
            return answer.message, [json.dumps(call.body) for call in server.model_calls[before:]]

        assert (await say(FIRST_WORDS))[0] == "the fake model answers"
        assert (await say("/new"))[0].startswith("Started session 2")
        answer, sent_in_new = await say("what is my name?")
        assert answer == "the fake model answers" and sent_in_new
        assert (await say("/resume 1"))[0].startswith("Back to session 1")
        answer, sent_resumed = await say("what is my name, again?")
        listing, _ = await say("/sessions")
    assert answer == "the fake model answers"
    assert not any(FIRST_WORDS in body for body in sent_in_new), "/new: the CLI starts without the first session"
    assert FIRST_WORDS in sent_resumed[-1] and "what is my name?" not in sent_resumed[-1], \
        "/resume 1: the CLI sends the first session's turns, and none of the second's"
    lines = listing.splitlines()
    assert "2 turns" in lines[1] and FIRST_WORDS in lines[1] and lines[1].startswith("▶ 1.")
    assert "1 turn ·" in lines[2] and "what is my name?" in lines[2]
