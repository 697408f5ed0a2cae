"""`switchyard run` with a preset pointed at a custom model endpoint (`base_url`, `api_key_env`): the message is
answered by the fake model server (tests/fakes/model_server.py) through the fake CLI, with the key the
gateway read; `check`, `run` and `doctor` name a key variable that is not set."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Switchyard
from tests.e2e.fake_thread import FakeThread
from tests.fakes.clis import FOLDER as FAKE_CLIS
from tests.fakes.model_server import ModelServer

pytestmark = pytest.mark.e2e

KEY_VARIABLE = "MY_MODEL_GATEWAY_KEY"
PREFIX = {"claude": "/anthropic", "codex": "/openai/v1", "gemini": "/google"}
ORCHESTRATOR: dict[str, Any] = {
    "selector": {"provider": "rules"}, "diagnostics": {"provider": "rules"}, "rules": {"default_workflow": "chat"},
    "agents": {"helper": {"provider": "remote", "prompt": "{{message}}"}},
    "workflows": {"chat": {"description": "Reply", "steps": [{"id": "Reply", "agent": "helper"}]}},
}


def _configure(switchyard: Switchyard, tmp_path: Path, provider: dict[str, Any]) -> Path:
    """The fakes on PATH, an empty HOME for the user; returns that HOME."""
    user_home = tmp_path / "user-home"
    user_home.mkdir()
    switchyard.env.update(PATH=f"{FAKE_CLIS}{os.pathsep}{switchyard.env.get('PATH', '')}", HOME=str(user_home),
                          FAKE_CLI_STATE=str(tmp_path / "fake-cli-state"))
    switchyard.configure({"providers": {"remote": provider}}, ORCHESTRATOR)
    return user_home


@pytest.mark.parametrize("cli", sorted(PREFIX))
def test_a_message_is_answered_by_the_providers_endpoint_with_its_key(
        switchyard: Switchyard, tmp_path: Path, cli: str) -> None:
    with FakeThread(lambda: ModelServer(reply=f"answered by the endpoint through {cli}")) as model:
        user_home = _configure(switchyard, tmp_path, {"type": cli, "base_url": model.server.url + PREFIX[cli],
                                                      "api_key_env": KEY_VARIABLE})
        switchyard.env[KEY_VARIABLE] = "sk-endpoint-e2e"
        switchyard.start()
        sent = switchyard.send("hello there")
        [reply] = switchyard.reply_to(sent["messageId"])
        calls = model.run(lambda: list(model.server.model_calls))
        assert switchyard.stop() == 0
    assert reply["message"] == f"answered by the endpoint through {cli}"
    assert [(call.path.startswith(PREFIX[cli]), call.api_key) for call in calls] == [(True, "sk-endpoint-e2e")]
    assert list(user_home.iterdir()) == []
    assert "sk-endpoint-e2e" not in switchyard.output()


def test_check_and_run_name_an_api_key_env_that_is_not_set(switchyard: Switchyard, tmp_path: Path) -> None:
    _configure(switchyard, tmp_path, {"type": "codex", "base_url": "http://127.0.0.1:9/v1",
                                      "api_key_env": KEY_VARIABLE})
    switchyard.env.pop(KEY_VARIABLE, None)
    expected = (f"{switchyard.home.settings_file}: providers.remote.api_key_env: the environment variable "
                f"{KEY_VARIABLE} is not set")
    checked = switchyard.cli("check")
    assert checked.returncode == 2 and checked.stdout.startswith(expected), checked.stdout
    refused = switchyard.cli("run")
    assert refused.returncode == 2 and expected in refused.stderr
    assert f"api_key_env: the environment variable {KEY_VARIABLE} is not set" in switchyard.cli("doctor").stdout
    switchyard.env[KEY_VARIABLE] = "sk-set"
    assert switchyard.cli("check").returncode == 0


def test_an_answer_holding_a_lone_surrogate_and_a_nul_reaches_the_user_and_the_run_is_listed(
        switchyard: Switchyard, tmp_path: Path) -> None:
    """The model answers with a lone surrogate and a NUL, which the CLI's JSON envelope spells `\\ud800` and
    `\\u0000`: the run completes, the user gets the answer with U+FFFD, and `runs` and `runs show` work
    (before, the run failed writing its output, and saving its state would have failed too)."""
    with FakeThread(lambda: ModelServer(reply="broken \ud800 and \x00 here")) as model:
        _configure(switchyard, tmp_path, {"type": "claude", "base_url": model.server.url + PREFIX["claude"],
                                          "api_key_env": KEY_VARIABLE})
        switchyard.env[KEY_VARIABLE] = "sk-endpoint-e2e"
        switchyard.start()
        sent = switchyard.send("hello there")
        [reply] = switchyard.reply_to(sent["messageId"])
        assert switchyard.stop() == 0
    assert reply["message"] == "broken \ufffd and \ufffd here"
    listed = switchyard.cli("runs", "--json")
    assert listed.returncode == 0, listed.stderr
    [run] = json.loads(listed.stdout)
    assert run["state"] == "done"
    shown = switchyard.cli("runs", "show", run["runId"])
    assert shown.returncode == 0 and "(workflow chat): done" in shown.stdout, shown.stderr
    shown = switchyard.cli("runs", "show", run["runId"], "--json")
    assert json.loads(shown.stdout)["state"]["steps"]["Reply"]["output"] == "broken \ufffd and \ufffd here"
    assert "Traceback" not in switchyard.output()
