"""The CLI as a user meets it: init, the embedded default over the console, send --wait, status."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import SWITCHYARD, Switchyard

pytestmark = pytest.mark.e2e


class _LineReader:
    """Reads a process's stdout line by line with a deadline (no buffered line is ever missed)."""

    def __init__(self, process: subprocess.Popen[bytes]):
        assert process.stdout is not None
        self.fd = process.stdout.fileno()
        self.buffer = b""

    def line_containing(self, needle: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        selector = selectors.DefaultSelector()
        selector.register(self.fd, selectors.EVENT_READ)
        while True:
            *lines, self.buffer = self.buffer.split(b"\n")
            for index, raw in enumerate(lines):
                if needle in raw.decode():
                    self.buffer = b"\n".join([*lines[index + 1:], self.buffer])
                    return raw.decode()
            if time.monotonic() > deadline:
                raise AssertionError(f"no line containing {needle!r} within {timeout}s")
            if selector.select(timeout=0.2):
                chunk = os.read(self.fd, 65536)
                if not chunk:
                    raise AssertionError(f"stdout closed before a line containing {needle!r}")
                self.buffer += chunk


def test_quick_start_console_chat_with_no_settings_at_all(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env["SWITCHYARD_HOME"] = str(tmp_path / "fresh-home")
    process = subprocess.Popen([SWITCHYARD, "run"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL)
    try:
        assert process.stdin is not None
        reader = _LineReader(process)
        process.stdin.write(b"hello switchyard\n")
        process.stdin.flush()
        assert "You said: hello switchyard" in reader.line_containing("hello switchyard", 30)
        process.stdin.write(b"/help\n")
        process.stdin.flush()
        assert "chat" in reader.line_containing("chat", 30)
        process.terminate()
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()


def test_init_writes_settings_and_orchestrator(switchyard: Switchyard) -> None:
    result = switchyard.cli("init")
    assert result.returncode == 0, result.stderr
    assert switchyard.home.settings_file.exists()
    assert (switchyard.home.orchestrators / "main" / "orchestrator.yaml").exists()
    assert switchyard.cli("init").returncode == 0  # idempotent, overwrites nothing


def test_send_wait_prints_the_reply(switchyard: Switchyard) -> None:
    switchyard.configure()
    switchyard.start()
    result = switchyard.cli("send", "hi from the cli", "--wait", "20")
    assert result.returncode == 0, result.stderr
    assert "write about hi from the cli" in result.stdout


def test_status_reports_queue_dead_letters_runs_and_heartbeat(switchyard: Switchyard) -> None:
    switchyard.configure({"channels": [{"id": "beat", "type": "heartbeat", "interval_sec": 1}]})
    switchyard.start()
    (switchyard.home.incoming / "bad.json").write_text("{oops")
    switchyard.cli("send", "anything", "--wait", "20")
    deadline = time.monotonic() + 20
    while True:
        status = json.loads(switchyard.cli("status", "--json").stdout)
        beats = status.get("heartbeats") or [{}]
        if status["dead_letters"] and beats[0].get("last_answer_at"):
            break
        assert time.monotonic() < deadline, status
        time.sleep(0.1)
    assert status["gateway"]["running"] is True
    assert status["gateway"]["channels"]["beat"]["state"] == "running"
    assert set(status["queue"]) >= {"incoming", "processing", "outgoing", "failed", "sent"}
    assert "not valid JSON" in status["dead_letters"][0]["reason"]
    assert beats[0]["missed"] is False and beats[0]["last_rtt_ms"] >= 0
    text = switchyard.cli("status").stdout
    assert "gateway: running" in text and "heartbeat beat: ok" in text


def test_invalid_settings_name_the_key_and_exit_2(switchyard: Switchyard) -> None:
    switchyard.home.create()
    switchyard.home.settings_file.write_text("queue: {max_attempts: zero}\n")
    result = switchyard.cli("run")
    assert result.returncode == 2
    assert "queue.max_attempts" in result.stderr


@pytest.mark.parametrize(
    ("channel", "named"),
    [
        ({"id": "desk", "type": "console", "alow_from": ["1"]}, "channels.0 (desk): alow_from: Extra inputs"),
        ({"id": "beat", "type": "heartbeat", "intervall_sec": 5}, "channels.0 (beat): intervall_sec: Extra inputs"),
        ({"id": "mystery", "type": "carrier-pigeon"}, "channels.0 (mystery): type: no installed plugin provides"),
    ],
)
def test_a_typo_or_unknown_type_in_a_channel_profile_stops_run_with_exit_2(
        switchyard: Switchyard, channel: dict[str, Any], named: str) -> None:
    switchyard.configure({"channels": [channel]})
    result = switchyard.cli("run")
    assert result.returncode == 2, result.stderr
    assert f"{switchyard.home.settings_file}: {named}" in result.stderr
    assert not (switchyard.home.state / "gateway.json").exists()


def test_a_missing_settings_file_named_on_the_command_line_is_an_error(switchyard: Switchyard,
                                                                      tmp_path: Path) -> None:
    for command in ("run", "status"):
        result = switchyard.cli("--settings", str(tmp_path / "nope.yaml"), command)
        assert result.returncode == 2
        assert f"{tmp_path / 'nope.yaml'}: file not found" in result.stderr


HELLO_PLUGIN = """
from gateway import hookimpl

def hello(args, home, settings):
    print(f"hello {args.name} from {home.root.name}, {len(settings.plugins)} plugin listed")
    return 0

@hookimpl
def switchyard_cli(commands):
    parser = commands.add_parser("hello", help="says hello")
    parser.add_argument("name")
    parser.set_defaults(run=hello)
"""


def test_a_plugin_listed_in_settings_adds_a_usable_subcommand(switchyard: Switchyard, tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "hello_cmd.py").write_text(HELLO_PLUGIN)
    switchyard.env["PYTHONPATH"] = str(site)
    switchyard.configure({"plugins": ["hello_cmd"]})
    result = switchyard.cli("hello", "ada")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "hello ada from home, 1 plugin listed"
