"""The console as a person at a terminal meets it: `switchyard run` on a pseudo-terminal it owns."""

from __future__ import annotations

import json
import os
import pty
import re
import selectors
import socket
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.testing import wait_until
from tests.e2e.conftest import Switchyard
from tests.e2e.fake_thread import FakeThread
from tests.fakes.telegram_server import FakeTelegram
from tests.process import SWITCHYARD, clean_environment, kill_session

pytestmark = pytest.mark.e2e

# Makes the pty on fd 0 the controlling terminal of a new session, then runs the command in the terminal's
# foreground, or (argv[1] == "background") in a process group of its own, as `switchyard run &` does;
# it exits with the command's exit code.
ON_TERMINAL = """
import fcntl, signal, subprocess, sys, termios
fcntl.ioctl(0, termios.TIOCSCTTY, 0)
child = subprocess.Popen(sys.argv[2:], process_group=0 if sys.argv[1] == "background" else None)
signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the command; this waits for its exit code
sys.exit(child.wait())
"""


class TerminalSession:
    """One command on a fresh pseudo-terminal: what it printed so far, and keys typed into it."""

    def __init__(self, argv: list[str], env: dict[str, str], *, background: bool = False):
        self.master, slave = pty.openpty()
        self.process = subprocess.Popen([sys.executable, "-c", ON_TERMINAL, "background" if background else "-",
                                         *argv], env=env, stdin=slave, stdout=slave, stderr=slave,
                                        start_new_session=True)
        os.close(slave)
        self.output = ""
        self._seen = 0

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def read_until(self, needle: str, timeout: float = 30) -> str:
        """The output from the end of the last match up to and including `needle` (waiting for it)."""
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self.master, selectors.EVENT_READ)
            while (found := self.output.find(needle, self._seen)) < 0:
                left = deadline - time.monotonic()
                assert left > 0, f"no {needle!r} within {timeout}s; output:\n{self.output[-3000:]}"
                if selector.select(timeout=min(left, 0.5)):
                    try:
                        chunk = os.read(self.master, 65536)
                    except OSError:  # EIO: every process holding the terminal has exited
                        chunk = b""
                    assert chunk, f"the terminal closed before {needle!r}; output:\n{self.output[-3000:]}"
                    self.output += chunk.decode(errors="replace")
        start, self._seen = self._seen, found + len(needle)
        return self.output[start:self._seen]

    def close(self) -> None:
        """Kills every process of the terminal's session: the wrapper, and `switchyard run` also when it
        runs in a process group of its own (the background case, which no SIGHUP reaches)."""
        kill_session(self.process.pid)
        self.process.wait(10)
        os.close(self.master)


@pytest.fixture
def terminals() -> Iterator[list[TerminalSession]]:
    """The terminal sessions a test opens, each closed (its processes killed) after it, also when it failed."""
    sessions: list[TerminalSession] = []
    yield sessions
    for session in sessions:
        session.close()


def claimed_from(switchyard: Switchyard, conversation: str) -> list[dict[str, object]]:
    return [e for e in switchyard.events("message.claimed") if e.get("conversation") == conversation]


def _run_on_terminal(switchyard: Switchyard, terminals: list[TerminalSession], *,
                     background: bool = False) -> TerminalSession:
    session = TerminalSession([SWITCHYARD, "--home", str(switchyard.home.root), "run"], switchyard.env,
                              background=background)
    terminals.append(session)
    wait_until(lambda: switchyard.count("gateway.started") or session.process.poll() is not None, 30)
    assert session.process.poll() is None, session.output
    return session


def test_quick_start_console_chat_with_no_settings_at_all(tmp_path: Path,
                                                          terminals: list[TerminalSession]) -> None:
    """A fresh home, a terminal: a prompt, an answer; Ctrl-D ends the console, the web chat of the embedded
    default keeps the gateway running, and Ctrl-C ends it (exit 0)."""
    session = TerminalSession([SWITCHYARD, "run"], clean_environment({"SWITCHYARD_HOME": str(tmp_path / "fresh")}))
    terminals.append(session)
    session.read_until("> ")
    session.type("hello switchyard\r")
    assert "hello switchyard" in session.read_until("You said: hello switchyard")
    session.read_until("> ")
    session.type("/help\r")
    session.read_until("chat")
    session.type("\x04")  # Ctrl-D on an empty line
    session.read_until("stopped: end of input")
    session.type("\x03")
    assert session.process.wait(30) == 0
    assert "no channel is left running" not in session.output


def test_ctrl_c_while_typing_stops_cleanly_and_gives_the_terminal_back_as_it_was(
        tmp_path: Path, terminals: list[TerminalSession]) -> None:
    session = TerminalSession([SWITCHYARD, "run"], clean_environment({"SWITCHYARD_HOME": str(tmp_path / "fresh")}))
    terminals.append(session)
    modes = termios.tcgetattr(session.master)
    session.read_until("> ")
    session.type("half a thou")
    session.read_until("half a thou")
    assert termios.tcgetattr(session.master) != modes  # line editing: no echo, no canonical mode
    session.type("\x03")
    assert session.process.wait(30) == 0
    assert termios.tcgetattr(session.master) == modes


def test_a_late_reply_is_printed_above_the_line_being_typed_with_its_run_id(
        switchyard: Switchyard, terminals: list[TerminalSession]) -> None:
    switchyard.configure({"channels": [{"id": "console", "type": "console"}]})
    session = _run_on_terminal(switchyard, terminals)
    session.read_until("> ")
    session.type("half typ")
    session.read_until("half typ")
    switchyard.cli("send", "meanwhile", "--conversation", "console", "--profile", "console")
    late = session.read_until("> half typ")
    assert "\r\x1b[K[writer, run r-" in late and "write about meanwhile" in late
    session.type("ed\r")
    assert "write about half typed" in session.read_until("write about half typed")
    wait_until(lambda: len(claimed_from(switchyard, "console")) >= 2, 10)  # the event log is written per turn
    assert len(claimed_from(switchyard, "console")) == 2


def test_replies_to_other_conversations_and_empty_lines_never_reach_the_console(
        switchyard: Switchyard, terminals: list[TerminalSession]) -> None:
    switchyard.configure({"channels": [{"id": "console", "type": "console"}]})
    session = _run_on_terminal(switchyard, terminals)
    session.read_until("> ")
    session.type("\r   \r")
    sent = switchyard.cli("send", "from the cli", "--wait", "20")  # conversation `cli`, channel console
    assert "write about from the cli" in sent.stdout
    session.type("last\r")
    session.read_until("write about last")
    assert "from the cli" not in session.output
    wait_until(lambda: claimed_from(switchyard, "console"), 10)  # the event log is written per turn
    assert [e.get("conversation") for e in switchyard.events("message.claimed")] == ["cli", "console"]


def test_run_in_the_background_of_a_terminal_neither_reads_it_nor_is_stopped(
        switchyard: Switchyard, terminals: list[TerminalSession]) -> None:
    """`switchyard run &`: stdin is a terminal the process does not own; reading it would stop it."""
    switchyard.configure({"channels": [{"id": "console", "type": "console"}]})
    session = _run_on_terminal(switchyard, terminals, background=True)
    session.read_until("runs in the background of its terminal")
    assert "write about still answering" in switchyard.cli("send", "still answering", "--wait", "20").stdout
    status = json.loads(switchyard.cli("status", "--json").stdout)
    assert status["gateway"]["channels"]["console"]["state"] == "disabled"
    os.kill(status["gateway"]["pid"], 15)
    assert session.process.wait(30) == 0


# --- log lines while the console owns the terminal ------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port  # closed again: connecting to it is refused


def _typing(session: TerminalSession, text: str) -> None:
    session.read_until("> ")
    session.type(text)
    session.read_until(text)


def _log_lines(output: str) -> list[str]:
    """The log lines the console printed (each after the line it cleared), without the prompt drawn again."""
    return [line.split("\r\n")[0] for line in output.split("\r\x1b[K")[1:] if re.match(r"\d{4}-\d\d-\d\d ", line)]


def test_a_channel_that_cannot_reach_its_platform_logs_above_the_prompt(
        switchyard: Switchyard, terminals: list[TerminalSession]) -> None:
    """Each failed start of a channel is one line printed above the prompt, which is drawn again with what
    was being typed (not a line written into the middle of it)."""
    switchyard.env["SWITCHYARD_E2E_TG"] = "4242:never-used"
    switchyard.configure({"channels": [
        {"id": "console", "type": "console"},
        {"id": "tg", "type": "telegram", "token_env": "SWITCHYARD_E2E_TG",
         "base_url": f"http://127.0.0.1:{_closed_port()}/bot"}]})
    session = _run_on_terminal(switchyard, terminals)
    _typing(session, "half typ")
    for _ in range(2):  # the retries come ~0.5-1 s, then ~1-2 s apart
        shown = session.read_until("> half typ")
        assert shown.startswith("\r\x1b[K") and shown.count("\n") == 1, repr(shown)
        assert "channel tg (telegram) is retrying: " in shown and "cannot log in to the Bot API" in shown
    assert "Traceback" not in session.output
    session.type("ed\r")
    assert "write about half typed" in session.read_until("write about half typed")


def test_a_channel_that_loses_its_platform_says_so_once_a_failure_without_a_traceback(
        switchyard: Switchyard, terminals: list[TerminalSession]) -> None:
    """The Bot API goes away under a connected Telegram channel: each reconnect attempt is one line on the
    console (python-telegram-bot's own tracebacks of the same failures are kept out of it)."""
    telegram = FakeThread(FakeTelegram)
    with telegram:
        fake = telegram.server
        switchyard.env["SWITCHYARD_E2E_TG"] = fake.token
        switchyard.configure({"channels": [
            {"id": "console", "type": "console"},
            {"id": "tg", "type": "telegram", "token_env": "SWITCHYARD_E2E_TG", "base_url": f"{fake.url}/bot",
             "poll_timeout_sec": 1, "reconnect_initial_sec": 0.2, "reconnect_max_sec": 0.5}]})
        session = _run_on_terminal(switchyard, terminals)
        session.read_until("connected as @")
        _typing(session, "still here")
    gone_at = len(session.output)
    for _ in range(3):
        session.read_until("> still here")
    after = _log_lines(session.output[gone_at:])
    assert len(after) >= 3 and all("telegram tg: receiving updates failed" in line for line in after), after
    assert "Traceback" not in session.output
    whole = (switchyard.home.logs / "console.log").read_text()  # every line shown, also kept whole
    assert all(line in whole for line in after)
