"""`switchyard sessions list` and `switchyard sessions attach` through the CLI's entry (gateway.cli.main): the
operator attaches a claude session started at a terminal to a conversation, the chat continues it with the REAL
claude against the fake model (its earlier turns are in what claude sends), and the terminal's own transcript is
kept; the listing shows every conversation's sessions."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path
from subprocess import PIPE
from typing import Any

import pytest

from gateway.api import HandlerContext
from gateway.cli import main
from gateway.home import Home
from gateway.settings import ProviderSettings
from orchestrator.storage.postgres.sessions import PgSessionStore
from tests.backends.postgres.helpers import pg_home, switchyard
from tests.fakes.model_server import ModelServer
from tests.fakes.orchestrator import API_PREFIX, REMOTE_AGENT_CONFIG, isolate_real_cli, make_message
from tests.integration.test_real_endpoints import KEY_VARIABLE, real_cli

SETTINGS = """
channels:
  - {id: console, type: console}
providers:
  remote: {type: claude}
  other: {type: codex}
"""


def cli(home: Home, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["--home", str(home.root), "sessions", *args])
    out, err = capsys.readouterr()
    return code, out, err


async def test_a_terminal_claude_session_attached_to_a_conversation_is_continued_from_the_chat(
    make_context: Callable[..., HandlerContext], write_config: Callable[[str], Path], workspace: Path,
    start: Callable[[HandlerContext], Any], home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    binary = real_cli("claude")
    user_home = isolate_real_cli(tmp_path, monkeypatch, KEY_VARIABLE, "sk-real-claude")
    (home.root / "settings.yaml").write_text(SETTINGS)
    write_config(REMOTE_AGENT_CONFIG)
    async with ModelServer(reply="the fake model answers") as server:
        url = server.url + API_PREFIX["claude"]
        terminal = await asyncio.create_subprocess_exec(  # the operator at a terminal, in the workspace
            binary, "-p", "--output-format", "json", stdin=PIPE, stdout=PIPE, cwd=workspace,
            env={**os.environ, "ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-real-claude"})
        stdout, _ = await asyncio.wait_for(terminal.communicate(b"remember: the launch code is PINEAPPLE-42"), 90)
        session_id = json.loads(stdout)["session_id"]

        code, out, err = cli(home, capsys, "attach", "console", "c1", session_id)
        assert code == 1 and "--provider" in err and "other, remote" in err, "two presets: which one is asked"
        code, out, _ = cli(home, capsys, "attach", "console", "c1", session_id, "--provider", "remote")
        assert code == 0 and "as session 2" in out

        provider = ProviderSettings(type="claude", binary=binary, base_url=url, api_key_env=KEY_VARIABLE,
                                    timeout_sec=90, first_output_sec=60)
        orchestrator = await start(make_context({"remote": provider}))
        before = len(server.model_calls)
        [answer] = await orchestrator.handle(make_message("what is the launch code?", conversationId="c1"))
        sent = [json.dumps(call.body) for call in server.model_calls[before:]]
    assert answer.message == "the fake model answers"
    assert "PINEAPPLE-42" in sent[-1], "the chat continued the terminal's session"
    assert list(user_home.glob(f".claude/projects/*/{session_id}.jsonl")), "the terminal's transcript is kept"

    code, out, _ = cli(home, capsys, "list", "--json")
    listed = json.loads(out)["console/console/c1"]
    assert [(s["number"], s["current"], s["attached"], s["turns"]) for s in listed] == [
        (1, False, None, 0), (2, True, "remote", 1)]
    code, out, _ = cli(home, capsys, "list")
    assert code == 0 and "console/console/c1" in out and "what is the launch code?" in out


def test_attach_names_an_unknown_profile(home: Home, capsys: pytest.CaptureFixture[str]) -> None:
    (home.root / "settings.yaml").write_text(SETTINGS)
    code, _, err = cli(home, capsys, "attach", "nope", "c1", "some-id", "--provider", "remote")
    assert code == 1 and "no channel profile 'nope'" in err
    code, out, _ = cli(home, capsys, "list")
    assert code == 0 and out.strip() == "no conversation has an agent session yet"


def test_on_postgres_attach_and_list_use_the_database(tmp_path: Path, db: str) -> None:
    home = pg_home(tmp_path, SETTINGS)
    result = switchyard(home, db, "sessions", "attach", "console", "c9", "thread-from-a-terminal", "--provider",
                        "other")
    assert result.returncode == 0, result.stderr
    result = switchyard(home, db, "sessions", "list", "--json")
    assert result.returncode == 0, result.stderr
    [first, attached] = json.loads(result.stdout)["console/console/c9"]
    assert (first["number"], first["current"]) == (1, False)
    assert (attached["number"], attached["current"], attached["attached"]) == (2, True, "other")
    resumed = PgSessionStore(db).session("other", "conv:console/console/c9#session-2", assigns_ids=False)
    assert (resumed.id, resumed.resume) == ("thread-from-a-terminal", True)


def test_an_unreachable_database_is_one_line_and_exit_2(tmp_path: Path) -> None:
    dsn = "postgresql://someone:hunter2@127.0.0.1:1/none?connect_timeout=2"
    result = switchyard(pg_home(tmp_path), dsn, "sessions", "list")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "hunter2" not in result.stderr + result.stdout
