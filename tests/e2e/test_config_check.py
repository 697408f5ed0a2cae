"""Configuration checked before it is used: `run` refuses a broken orchestrator.yaml, `check` validates a
home without starting it, and a running gateway keeps its last valid orchestrator.yaml."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.testing import wait_until
from orchestrator.config.default import DEFAULT_ORCHESTRATOR_YAML
from tests.e2e.conftest import ORCHESTRATOR, Switchyard

pytestmark = pytest.mark.e2e


def _orchestrator_file(switchyard: Switchyard) -> Path:
    return switchyard.home.orchestrators / "main" / "orchestrator.yaml"


def _with(**changes: Any) -> dict[str, Any]:
    return {**ORCHESTRATOR, **changes}


BROKEN = [
    pytest.param("agents: {writer: {provider: fake_agent}\nworkflows: {}\n",
                 "cannot read: invalid YAML at line 1, column 9", id="bad-yaml"),
    pytest.param(_with(agents={"writer": {"provider": "ghost"}}),
                 "agents.writer.provider: unknown provider 'ghost'", id="unknown-provider"),
    pytest.param(_with(reply_within_secs=5), "reply_within_secs: unknown key; did you mean `reply_within_sec`",
                 id="misspelt-key"),
    pytest.param(_with(workflows={"chat": {"description": "d", "steps": [{"id": "Reply", "agent": "nobody"}]}}),
                 "workflows.chat.steps.0.agent: unknown agent 'nobody'", id="unknown-agent"),
    pytest.param(_with(rules={"default_workflow": "nope"}),
                 "rules.default_workflow: unknown workflow 'nope'", id="unknown-workflow"),
]


def _write(switchyard: Switchyard, content: str | dict[str, Any]) -> Path:
    path = _orchestrator_file(switchyard)
    path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
    return path


@pytest.mark.parametrize(("content", "named"), BROKEN)
def test_run_refuses_a_broken_orchestrator_yaml_naming_the_file_and_key(
        switchyard: Switchyard, content: str | dict[str, Any], named: str) -> None:
    switchyard.configure()
    path = _write(switchyard, content)
    result = switchyard.cli("run")
    assert result.returncode == 2, result.stderr
    assert f"{path}: {named}" in result.stderr
    assert not (switchyard.home.state / "gateway.json").exists() and switchyard.count("gateway.started") == 0


@pytest.mark.parametrize(("content", "named"), BROKEN)
def test_check_names_each_problem_and_exits_2(switchyard: Switchyard, content: str | dict[str, Any],
                                             named: str) -> None:
    switchyard.configure()
    path = _write(switchyard, content)
    result = switchyard.cli("check")
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"{path}: {named}" in result.stdout.splitlines()[0]
    report = json.loads(switchyard.cli("check", "--json").stdout)
    assert report["ok"] is False and report["problems"][0].startswith(f"{path}: {named}")


def test_check_on_a_good_home_says_ok_and_starts_nothing(switchyard: Switchyard) -> None:
    switchyard.configure({"channels": [{"id": "beat", "type": "heartbeat", "interval_sec": 60}]})
    result = switchyard.cli("check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith(f"ok: {switchyard.home.settings_file}: 1 channel profile(s), 3 provider(s)")
    report = json.loads(switchyard.cli("check", "--json").stdout)
    assert report["ok"] is True and report["problems"] == [] and report["channels"] == ["beat"]
    assert not switchyard.home.events_file.exists()


def test_check_lists_problems_of_settings_and_orchestrator_together(switchyard: Switchyard) -> None:
    switchyard.configure({"channels": [{"id": "beat", "type": "heartbeat", "intervall_sec": 5}]},
                         _with(selector={"provider": "ghost"}))
    lines = switchyard.cli("check").stdout.splitlines()
    assert lines[0].startswith(f"{switchyard.home.settings_file}: channels.0 (beat): intervall_sec: unknown key;")
    assert lines[1].startswith(f"{_orchestrator_file(switchyard)}: selector.provider: unknown provider 'ghost'")
    assert lines[2] == "2 problems found"


def test_check_on_invalid_settings_names_the_key(switchyard: Switchyard) -> None:
    switchyard.home.create()
    switchyard.home.settings_file.write_text("queue: {max_attempts: zero}\n")
    result = switchyard.cli("check")
    assert result.returncode == 2
    assert result.stdout.startswith(f"{switchyard.home.settings_file}: queue.max_attempts:")


def _echo_config(prompt: str, provider: str = "echo") -> dict[str, Any]:
    return {"agents": {"echo": {"provider": provider, "prompt": prompt}},
            "workflows": {"chat": {"description": "Reply", "steps": [{"id": "Reply", "agent": "echo"}]}},
            "rules": {"default_workflow": "chat"}}


def _answer(switchyard: Switchyard, text: str) -> str:
    sent = switchyard.send(text)
    message: str = switchyard.reply_to(sent["messageId"])[0]["message"]
    return message


def test_a_broken_edit_keeps_the_last_valid_config_in_use_and_is_reported(switchyard: Switchyard) -> None:
    switchyard.configure(orchestrator=_echo_config("First: {{message}}"))
    switchyard.start()
    assert _answer(switchyard, "one") == "First: one"
    path = _write(switchyard, _echo_config("Second: {{message}}", provider="ghost"))
    [rejected] = wait_until(lambda: switchyard.events("orchestrator.config_rejected"))  # before any message
    assert _answer(switchyard, "two") == "First: two"
    assert f"{path}: agents.echo.provider: unknown provider 'ghost'" in rejected["reason"]
    assert "WARNING" in next(line for line in switchyard.output().splitlines() if "stays in use" in line)
    status = switchyard.cli("status")
    assert f"{path}: agents.echo.provider: unknown provider 'ghost'" in status.stdout
    assert "agents.echo.provider" in " ".join(json.loads(switchyard.cli("status", "--json").stdout)["config"])
    _write(switchyard, _echo_config("Third, fixed: {{message}}"))
    assert _answer(switchyard, "three") == "Third, fixed: three"
    wait_until(lambda: switchyard.count("orchestrator.config_reloaded") == 1)
    assert "agents.echo.provider" not in switchyard.cli("status").stdout
    assert switchyard.stop() == 0


def test_run_says_which_default_orchestrator_yaml_it_wrote(switchyard: Switchyard) -> None:
    """A workspace without orchestrator.yaml: `run` wrote the default one without a word."""
    switchyard.configure()
    path = _orchestrator_file(switchyard)
    path.unlink()
    checked = switchyard.cli("check")
    assert checked.returncode == 0 and (f"warning: {path}: (file): not found; run would write the default one there"
                                        in checked.stdout.splitlines()), checked.stdout
    switchyard.start()
    assert path.read_text() == DEFAULT_ORCHESTRATOR_YAML
    [line] = [line for line in switchyard.output().splitlines() if "wrote the default" in line]
    assert "WARNING" in line and line.endswith(f"wrote the default {path} (there was none)")
    assert switchyard.stop() == 0
