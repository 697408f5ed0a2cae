"""`/new`, `/sessions` and `/resume N` through the Orchestrator with the fake claude, codex and gemini CLIs
(tests/fakes/clis): which session each turn continues, read from the argv the CLI got."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.api import HandlerContext
from gateway.settings import ProviderSettings
from tests.fakes.clis import FakeClis
from tests.fakes.orchestrator import REMOTE_AGENT_CONFIG, make_message


@pytest.mark.parametrize("cli", ["claude", "codex", "gemini"])
async def test_each_turn_continues_the_session_the_conversation_switched_to(
    fake_clis: FakeClis, make_context: Callable[..., HandlerContext], write_config: Callable[[str], Path],
    start: Callable[[HandlerContext], Any], cli: str,
) -> None:
    write_config(REMOTE_AGENT_CONFIG)
    orchestrator = await start(make_context({"remote": ProviderSettings.model_validate({"type": cli})}))

    async def say(text: str, conversation: str = "c1") -> str:
        [answer] = await orchestrator.handle(make_message(text, conversationId=conversation))
        return answer.message

    await say("my name is Ada")
    await say("/new")
    await say("a new start")
    await say("elsewhere", conversation="c2")
    assert (await say("/resume 1")).startswith("Back to session 1 (")
    await say("my name?")
    first, fresh, other, resumed = fake_clis.calls(cli)
    assert _resumed(cli, fresh) is None, "/new: a session of its own"
    assert _resumed(cli, resumed) == _ended_in(cli, first), "/resume 1 continues the first session"
    assert _resumed(cli, other) is None
    listing = (await say("/sessions")).splitlines()
    assert listing[1].startswith("▶ 1.") and "2 turns · “my name is Ada”" in listing[1]
    assert listing[2].startswith("  2.") and "1 turn · “a new start”" in listing[2]
    other_listing = (await say("/sessions", conversation="c2")).splitlines()
    assert len(other_listing) == 3 and other_listing[1].startswith("▶ 1.") and "“elsewhere”" in other_listing[1], \
        "another conversation lists only its own session"


def _ended_in(cli: str, call: dict[str, Any]) -> str:
    """The session a call ended in (claude: the fork it made of the one it resumed)."""
    return str(call["thread_id"] if cli == "codex" else call["session_id"])


def _resumed(cli: str, call: dict[str, Any]) -> str | None:
    """The session a call continued, None for a new one."""
    argv: list[str] = call["argv"]
    flag = "resume" if cli == "codex" else "--resume"
    return argv[argv.index(flag) + 1] if flag in argv else None
