"""gateway/cli/tables.py: what the operator's tables print of untrusted text (a sender's words in a dead
letter's reason, a display name, a conversation id), on a terminal (rich) and in a pipe."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import time

import pytest

from gateway.home import Home
from orchestrator.runs.state import RunState
from orchestrator.storage.files.runs import RunStore
from tests.process import SWITCHYARD, clean_environment

HOSTILE = "[/x]\x1b[2J\rapproved on tg: 1001"
SHOWN = "[/x]\\x1b[2J\\rapproved on tg: 1001"  # what the operator must see instead


def on_terminal(home: Home, *argv: str) -> tuple[int, str]:
    """Runs `switchyard ARGV` with a pseudo-terminal as stdout (rich tables); its exit code and output."""
    master, slave = pty.openpty()
    env = clean_environment({"COLUMNS": "400", "LINES": "50", "TERM": "dumb", "NO_COLOR": "1"})
    process = subprocess.Popen([SWITCHYARD, "--home", str(home.root), *argv], stdin=subprocess.DEVNULL,
                               stdout=slave, stderr=subprocess.STDOUT, env=env)
    os.close(slave)
    output = b""
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 1)[0]:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: every writer closed the terminal
                    break
                if not chunk:
                    break
                output += chunk
        return process.wait(timeout=30), output.decode("utf-8", "replace")
    finally:
        os.close(master)
        if process.poll() is None:
            process.kill()
            process.wait()


def in_a_pipe(home: Home, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SWITCHYARD, "--home", str(home.root), *argv], capture_output=True, text=True,
                          env=clean_environment(), timeout=60)


@pytest.fixture
def hostile_home(home: Home) -> Home:
    """A home whose dead letter, pairing request, run and last channel report carry markup and controls."""
    home.failed.mkdir(parents=True, exist_ok=True)
    (home.failed / "m1.json").write_text(json.dumps({"conversationId": HOSTILE, "text": "hi"}))
    (home.failed / "m1.json.error.json").write_text(json.dumps({"reason": f"refused: {HOSTILE}", "attempts": 5}))
    home.state.mkdir(parents=True, exist_ok=True)
    (home.state / "pairing.json").write_text(json.dumps({
        "pending": {"ABC123": {"profile": "tg", "senderId": "7", "sender": HOSTILE,
                                "requested_at": "2026-11-26T12:00:00.000Z"}},
        "approved": {}}))
    RunStore(home, fsync=False).save(RunState(
        runId="r-1", workflowId=HOSTILE, orchestratorId="main", message={}, conversation={"channel": "console"},
        steps={}, currentStep=HOSTILE))
    return home


@pytest.mark.parametrize("argv", [("dead", "list"), ("status",), ("pair", "list"), ("runs",)])
def test_markup_and_control_characters_are_shown_as_text_on_a_terminal(hostile_home: Home,
                                                                         argv: tuple[str, ...]) -> None:
    code, output = on_terminal(hostile_home, *argv)
    assert "Traceback" not in output and "MarkupError" not in output, output
    assert code in (0, 3), output  # status: 3, the gateway is not running
    output = output.replace("\r\n", "\n")  # the terminal's own line ends
    assert "\x1b[2J" not in output and "\r" not in output, output
    assert SHOWN in output, output


@pytest.mark.parametrize("argv", [("dead", "list"), ("dead", "show", "m1.json"), ("status",), ("pair", "list"),
                                  ("runs",), ("runs", "show", "r-1")])
def test_control_characters_are_shown_as_escapes_in_a_pipe(hostile_home: Home, argv: tuple[str, ...]) -> None:
    result = in_a_pipe(hostile_home, *argv)
    assert "\x1b" not in result.stdout and "\r" not in result.stdout, result.stdout
    assert SHOWN in result.stdout, result.stdout


def test_dead_show_prints_a_payload_holding_a_lone_surrogate(home: Home) -> None:
    """A dead letter kept for its lone surrogate (text no store can hold) can still be shown."""
    home.failed.mkdir(parents=True, exist_ok=True)
    (home.failed / "m2.json").write_bytes(b'{"conversationId": "c1", "text": "hi \\ud800 there"}')
    (home.failed / "m2.json.error.json").write_text(json.dumps({"reason": "text contains a lone surrogate"}))
    result = in_a_pipe(home, "dead", "show", "m2.json")
    assert result.returncode == 0, result.stderr
    assert "hi \\ud800 there" in result.stdout, result.stdout
