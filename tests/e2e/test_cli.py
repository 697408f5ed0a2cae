"""The CLI as a user meets it: init, send --wait, status (the console chat: tests/e2e/test_console.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Switchyard

pytestmark = pytest.mark.e2e


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
