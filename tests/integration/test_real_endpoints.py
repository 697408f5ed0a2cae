"""The REAL claude, codex and gemini CLIs through the presets with `base_url` and `api_key_env`, against the fake
model server on 127.0.0.1 (tests/fakes/model_server.py): what the fakes assume about how each CLI reads its
endpoint, checked on the real thing. Skipped where a CLI is not installed (on PATH or in /opt/agent-clis:
`npm install --prefix /opt/agent-clis @anthropic-ai/claude-code @openai/codex @google/gemini-cli`)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.api import HandlerContext
from gateway.home import Home
from gateway.settings import ProviderSettings
from tests.fakes.clis import FOLDER as FAKE_CLIS
from tests.fakes.model_server import ModelServer
from tests.fakes.orchestrator import (
    API_PREFIX,
    REMOTE_AGENT_CONFIG,
    FakeOutbox,
    isolate_real_cli,
    make_message,
)

INSTALLED = Path("/opt/agent-clis/node_modules/.bin")
KEY_VARIABLE = "SWITCHYARD_REAL_CLI_TEST_KEY"
PREFIX = API_PREFIX


def real_cli(name: str) -> str:
    """The path of the real CLI (never the fakes of tests/fakes/clis), or the test is skipped."""
    candidates = [INSTALLED / name]
    found = shutil.which(name)
    if found and Path(found).resolve().parent != FAKE_CLIS.resolve():
        candidates.insert(0, Path(found))
    for path in candidates:
        if path.exists() and os.access(path, os.X_OK):
            if path.resolve().suffix == ".js" and shutil.which("node") is None:
                pytest.skip(f"the real {name} CLI needs node, which is not on PATH")
            return str(path)
    pytest.skip(f"the real {name} CLI is not installed (not on PATH, not in {INSTALLED})")


@pytest.mark.parametrize("cli", sorted(PREFIX))
async def test_the_real_cli_answers_from_the_endpoint_with_the_key_and_keeps_its_session(
    make_context: Callable[..., HandlerContext], write_config: Callable[[str], Path],
    start: Callable[[HandlerContext], Any], home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: str,
) -> None:
    binary = real_cli(cli)
    user_home = isolate_real_cli(tmp_path, monkeypatch, KEY_VARIABLE, f"sk-real-{cli}")
    write_config(REMOTE_AGENT_CONFIG)
    async with ModelServer(reply="the fake model says hi") as server:
        provider = ProviderSettings(type=cli, binary=binary, base_url=server.url + PREFIX[cli],
                                    api_key_env=KEY_VARIABLE, timeout_sec=90, first_output_sec=60)
        orchestrator = await start(make_context({"remote": provider}))
        answers = [await orchestrator.handle(make_message(text, conversationId="c1"))
                   for text in ("my name is Ada", "what is my name?", "and again?")]
    assert [answer.message for [answer] in answers] == ["the fake model says hi"] * 3, answers
    calls = server.model_calls
    assert calls and all(call.path.startswith(PREFIX[cli]) for call in calls)
    assert {call.api_key for call in calls} == {f"sk-real-{cli}"}
    assert "my name is Ada" in json.dumps(calls[-1].body), "the later turns continued the first one's session"
    if cli == "claude":  # each turn forks; the session it came from is removed once the fork is recorded
        assert len(list(user_home.glob(".claude/projects/*/*.jsonl"))) == 1
    assert not (user_home / ".codex").exists() and not (user_home / ".gemini").exists()


async def test_the_real_claude_streams_its_answer_into_growing_drafts(
    make_context: Callable[..., HandlerContext], write_config: Callable[[str], Path],
    start: Callable[[HandlerContext], Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outbox: FakeOutbox,
) -> None:
    """`--include-partial-messages` as the preset passes it: the model's four deltas, 0.4 s apart, reach the
    chat as drafts holding the answer so far (what tests/fakes/clis/claude imitates, CLIS.md)."""
    binary = real_cli("claude")
    isolate_real_cli(tmp_path, monkeypatch, KEY_VARIABLE, "sk-real-claude")
    write_config(REMOTE_AGENT_CONFIG + "stream_after_sec: 0.2\nstream_interval_sec: 0.3\n")
    answer_text = "The quick brown fox jumps over the lazy dog. It was a sunny day."
    async with ModelServer(reply=answer_text, chunks=4, chunk_delay=0.4) as server:
        provider = ProviderSettings(type="claude", binary=binary, base_url=server.url, api_key_env=KEY_VARIABLE,
                                    timeout_sec=90, first_output_sec=60)
        orchestrator = await start(make_context({"remote": provider}))
        [answer] = await orchestrator.handle(make_message("tell me a story", conversationId="c1"))
    assert answer.message == answer_text
    drafts = [p.message for p in outbox.payloads if p.draft]
    assert len(drafts) >= 2 and all(answer_text.startswith(d) for d in drafts), drafts
    assert len(drafts[0]) < len(answer_text) and drafts == sorted(drafts, key=len)  # the last may be all of it
