"""`switchyard run` as a service runs it: no terminal, logs on stderr one line per record, failures logged."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from gateway.testing import drop_incoming, wait_until
from tests.e2e.conftest import Switchyard

pytestmark = pytest.mark.e2e

DOOMED = {"channel": "console", "channelProfileId": "console", "sender": "Ada", "senderId": "u1",
          "message": "always-fail", "timestamp": 1700000000000, "messageId": "doomed", "conversationId": "c1"}


def _json_lines(output: str) -> list[dict[str, Any]]:
    """Every line of the output, parsed: the test fails on a line that is not one JSON object."""
    return [json.loads(line) for line in output.splitlines() if line.strip()]


def test_dead_letters_and_invalid_payloads_reach_the_terminal_as_one_json_line_each(switchyard: Switchyard) -> None:
    switchyard.configure({"log_format": "json"})
    switchyard.start()
    drop_incoming(switchyard.home, b"{broken\n", "broken.json")
    drop_incoming(switchyard.home, DOOMED, "doomed.json")
    wait_until(lambda: (switchyard.home.failed / "doomed.json.error.json").exists()
               and (switchyard.home.failed / "broken.json.error.json").exists(), 30)
    assert switchyard.stop() == 0
    records = _json_lines(switchyard.output())
    assert {"time", "level", "logger", "message"} <= set(records[0])
    failures = [r["message"] for r in records if r["level"] in ("WARNING", "ERROR")]
    assert any("broken.json" in m and "not valid JSON" in m for m in failures), failures
    assert any("doomed.json" in m and "failed 3 time(s)" in m for m in failures), failures


def test_log_format_json_from_the_environment(switchyard: Switchyard) -> None:
    switchyard.configure()
    switchyard.env["SWITCHYARD_LOG_FORMAT"] = "json"
    switchyard.start()
    assert switchyard.stop() == 0
    records = _json_lines(switchyard.output())
    assert any("switchyard running on" in r["message"] for r in records), records


def test_without_a_terminal_the_console_is_disabled_and_send_is_answered(switchyard: Switchyard) -> None:
    """stdin from /dev/null (what systemd gives a service): the console never reads it, says why, and
    the gateway answers `switchyard send`."""
    switchyard.configure({"channels": [{"id": "console", "type": "console"}]})
    switchyard.start()
    assert "write about hello service" in switchyard.cli("send", "hello service", "--wait", "20").stdout
    status = json.loads(switchyard.cli("status", "--json").stdout)
    console = status["gateway"]["channels"]["console"]
    assert console["state"] == "disabled" and "stdin is not a terminal" in console["reason"]
    assert switchyard.stop() == 0
    notes = [line for line in switchyard.output().splitlines() if "stdin is not a terminal" in line]
    assert len(notes) == 1, switchyard.output()


def test_a_piped_stdin_is_not_read_either(switchyard: Switchyard) -> None:
    """`echo hi | switchyard run`: the pipe is left alone (a service's stdin is not a chat)."""
    switchyard.configure({"channels": [{"id": "console", "type": "console"}]})
    with switchyard.log_path.open("ab") as log:
        process = subprocess.Popen(switchyard.command(), env=switchyard.env, stdin=subprocess.PIPE, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    switchyard.process = process
    assert process.stdin is not None
    process.stdin.write(b"typed into a pipe\n")
    process.stdin.close()
    wait_until(lambda: switchyard.count("gateway.started") == 1, 30)
    assert "write about hello pipe" in switchyard.cli("send", "hello pipe", "--wait", "20").stdout
    assert switchyard.stop() == 0
    assert "stdin is not a terminal" in switchyard.output()
    assert not [e for e in switchyard.events("message.claimed") if e.get("conversation") == "console"]


def test_an_inbox_file_with_a_bad_name_is_logged_once_and_shown_by_status(switchyard: Switchyard) -> None:
    switchyard.configure({"channels": [{"id": "prompts", "type": "inbox", "poll_ms": 20, "settle_ms": 0}]})
    switchyard.start()
    misnamed = switchyard.home.root / "inbox" / "app" / "main" / "fix the login.md"
    misnamed.parent.mkdir(parents=True)
    misnamed.write_text("please")
    [event] = wait_until(lambda: switchyard.events("inbox.ignored"), 20)
    assert event["file"] == str(misnamed)
    wait_until(lambda: json.loads(switchyard.cli("status", "--json").stdout)["gateway"]["channels"]["prompts"]
               .get("reason"), 20)
    assert "app/main/fix the login.md" in switchyard.cli("status").stdout
    assert switchyard.stop() == 0  # the inbox scanned every 20 ms meanwhile
    assert len(switchyard.events("inbox.ignored")) == 1
    assert len([line for line in switchyard.output().splitlines() if "fix the login.md" in line]) == 1
