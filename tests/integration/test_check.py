"""gateway/cli/check.py: the problems of a home, gathered from the settings checks and every plugin's own."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway import hookimpl
from gateway.api import BuiltinProvider
from gateway.cli import main
from gateway.cli.check import home_problems, require_valid_home
from gateway.home import Home
from gateway.plugin_manager import build_plugin_manager
from gateway.settings import Settings, SettingsError
from orchestrator.config.default import DEFAULT_ORCHESTRATOR_YAML, write_default_orchestrator
from tests.process import SWITCHYARD, clean_environment


class Plugged:
    """A plugin declaring an in-process provider, and a check of its own file."""

    @hookimpl
    def switchyard_providers(self) -> dict[str, BuiltinProvider]:
        async def answer(prompt: str, request: dict[str, Any]) -> str:
            return prompt

        return {"plugged": answer}

    @hookimpl
    def switchyard_check(self, home: Home) -> list[str]:
        path = home.root / "plugged.yaml"
        return [] if path.exists() else [f"{path}: (file): missing"]


def test_a_provider_a_plugin_declares_is_known_to_the_orchestrator_check(home: Home) -> None:
    path = home.orchestrators / "main" / "orchestrator.yaml"
    path.parent.mkdir(parents=True)
    path.write_text("selector: {provider: plugged}\n")
    assert home_problems(home, Settings(), build_plugin_manager(), source="s.yaml") == [
        f"{path}: selector.provider: unknown provider 'plugged'; known: demo, echo, rules"]
    (home.root / "plugged.yaml").write_text("ok: true\n")
    assert home_problems(home, Settings(), build_plugin_manager(extra=[Plugged()]), source="s.yaml") == []


def test_every_problem_is_named_in_the_error_run_stops_on(home: Home) -> None:
    settings = Settings.model_validate({"channels": [{"id": "beat", "type": "heartbeat", "intervall_sec": 5}]})
    with pytest.raises(SettingsError) as caught:
        require_valid_home(home, settings, build_plugin_manager(extra=[Plugged()]), source="s.yaml")
    assert caught.value.problems == ["s.yaml: channels.0 (beat): intervall_sec: unknown key; "
                                     "did you mean `interval_sec`?",
                                     f"{home.root / 'plugged.yaml'}: (file): missing"]
    assert str(caught.value).startswith("2 problems:\n  s.yaml: channels.0 (beat): intervall_sec")


def test_check_names_every_problem_in_one_pass_one_line_each_with_the_likely_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SWITCHYARD_TEST_UNSET_TOKEN", raising=False)
    path = tmp_path / "settings.yaml"
    path.write_text("queue: {max_attemps: 5}\nallow_from: ['1']\nchannels:\n"
                    "  - {id: beat, type: heartbeat, intervall_sec: 5}\n"
                    "  - {id: tg, type: telegram, token_env: SWITCHYARD_TEST_UNSET_TOKEN}\n")
    assert main(["--home", str(tmp_path), "check"]) == 2
    assert capsys.readouterr().out.splitlines() == [
        f"{path}: queue.max_attemps: unknown key; did you mean `max_attempts`?",
        f"{path}: allow_from: unknown key here; it belongs under `channels`",
        f"{path}: channels.0 (beat): intervall_sec: unknown key; did you mean `interval_sec`?",
        f"{path}: channels.1 (tg): token_env: the environment variable SWITCHYARD_TEST_UNSET_TOKEN is not set "
        "(run would disable this profile)",
        f"warning: {path}: orchestrators.main.workspace: {tmp_path / 'orchestrators' / 'main'} does not exist; run "
        "would create it and write the default orchestrator.yaml there",
        "4 problems found, 1 warning"]
    assert main(["--home", str(tmp_path), "run"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "switchyard: invalid settings: 2 problems:",
        f"  {path}: queue.max_attemps: unknown key; did you mean `max_attempts`?",
        f"  {path}: allow_from: unknown key here; it belongs under `channels`"]


def test_check_is_not_ok_while_a_profile_token_variable_is_unset(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "settings.yaml").write_text("channels:\n  - {id: tg, type: telegram, token_env: SY_TEST_TOKEN}\n")
    monkeypatch.delenv("SY_TEST_TOKEN", raising=False)
    assert main(["--home", str(tmp_path), "check"]) == 2
    assert "channels.0 (tg): token_env: the environment variable SY_TEST_TOKEN is not set" in capsys.readouterr().out
    monkeypatch.setenv("SY_TEST_TOKEN", "123:abc")
    assert main(["--home", str(tmp_path), "check"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("ok: ")


HIDDEN_LIBRARIES = [  # (profile, the module hidden, the extra the line names)
    pytest.param({"type": "telegram", "token_env": "SY_TEST_TOKEN"}, "telegram", "python-telegram-bot", "telegram",
                 id="telegram"),
    pytest.param({"type": "discord", "token_env": "SY_TEST_TOKEN"}, "discord", "discord.py", "discord", id="discord"),
    pytest.param({"type": "slack", "bot_token_env": "SY_TEST_TOKEN", "app_token_env": "SY_TEST_TOKEN"}, "slack_bolt",
                 "slack-bolt", "slack", id="slack"),
    pytest.param({"type": "whatsapp", "token_env": "SY_TEST_TOKEN", "phone_number_id": "1",
                  "app_secret_env": "SY_TEST_TOKEN"}, "aiohttp", "aiohttp", "whatsapp", id="whatsapp"),
]


@pytest.mark.parametrize(("profile", "module", "library", "extra"), HIDDEN_LIBRARIES)
def test_check_names_a_channel_whose_library_is_not_installed(
        tmp_path: Path, profile: dict[str, str], module: str, library: str, extra: str) -> None:
    """`switchyard check` as a process whose PYTHONPATH hides the library (importing it raises ImportError, as
    when it is not installed): it said ok, and `run` then disabled the profile."""
    hidden = tmp_path / "hidden" / module
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text(f"raise ImportError({f'No module named {module!r}'!r})\n")
    home = tmp_path / "home"
    (home / "orchestrators" / "main").mkdir(parents=True)
    (home / "orchestrators" / "main" / "orchestrator.yaml").write_text(DEFAULT_ORCHESTRATOR_YAML)
    (home / "settings.yaml").write_text(yaml.safe_dump({"channels": [{"id": "chat", **profile}]}))
    env = clean_environment({"SY_TEST_TOKEN": "123:abc"})
    shown = subprocess.run([SWITCHYARD, "--home", str(home), "check"], env=env, capture_output=True, text=True,
                           timeout=60)
    assert (shown.returncode, shown.stdout.splitlines()[-1][:3]) == (0, "ok:"), shown.stdout + shown.stderr
    checked = subprocess.run([SWITCHYARD, "--home", str(home), "check"], capture_output=True, text=True, timeout=60,
                             env={**env, "PYTHONPATH": str(tmp_path / "hidden")})
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert checked.stdout.splitlines() == [
        f"{home / 'settings.yaml'}: channels.0 (chat): type: {library} is not installed: pip install '.[{extra}]' "
        "in the Switchyard clone (run would disable this profile)", "1 problem found"]


def test_check_names_a_plugin_module_that_does_not_import(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A misspelt module in `plugins:` was logged (twice) and `check` said ok: `run` goes on without it."""
    path = tmp_path / "settings.yaml"
    path.write_text("plugins: [plugins.telegarm]\nchannels: []\n")
    monkeypatch.setenv("SWITCHYARD_PLUGINS", "switchyard_pigeon")
    write_default_orchestrator(tmp_path / "orchestrators" / "main")
    assert main(["--home", str(tmp_path), "check"]) == 2
    assert capsys.readouterr().out.splitlines() == [
        f"{path}: plugins.0: cannot import plugin 'plugins.telegarm' (No module named 'plugins.telegarm'); run would "
        "go on without it",
        f"{path}: $SWITCHYARD_PLUGINS: cannot import plugin 'switchyard_pigeon' (No module named 'switchyard_pigeon'); "
        "run would go on without it",
        "2 problems found"]


def test_check_warns_of_a_workspace_or_orchestrator_yaml_run_would_create(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A misspelt workspace, and one without its orchestrator.yaml: `run` writes the default (echo and rules answer)."""
    path = tmp_path / "settings.yaml"
    path.write_text("orchestrators:\n  main: {workspace: orchestrators/mian}\n  ops: {workspace: ops}\n"
                    "channels: []\n")
    (tmp_path / "ops").mkdir()
    assert main(["--home", str(tmp_path), "check"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == [
        f"warning: {path}: orchestrators.main.workspace: {tmp_path / 'orchestrators' / 'mian'} does not exist; run "
        "would create it and write the default orchestrator.yaml there",
        f"warning: {tmp_path / 'ops' / 'orchestrator.yaml'}: (file): not found; run would write the default one there"]
    assert lines[2].startswith(f"ok: {path}: 0 channel profile(s)") and lines[2].endswith("; 2 warnings")
    assert len(lines) == 3


PLACEHOLDERS = """\
agents:
  writer: {provider: echo, prompt: "Plan: {{steps.Plan.output}} / {{steps.Nope.output}}"}
workflows:
  build:
    description: Plan, then write
    inputs: {type: object, properties: {topic: {type: string}}}
    steps:
      - {id: Plan, provider: echo, prompt: "Plan {{input.topic}} and {{input.topik}}, after {{steps.Write.output}}"}
      - {id: Write, agent: writer}
      - {id: Ship, command: [echo, "{{steps.Write.outptu}}"]}
  chat:
    description: Reply (an inbox's job gives it input.repo, with no `inputs` declared)
    steps:
      - {id: Reply, provider: echo, prompt: "{{input.repo}}"}
"""


def test_check_warns_of_a_template_naming_a_step_or_input_that_does_not_exist(
        home: Home, capsys: pytest.CaptureFixture[str]) -> None:
    """The agent received `{{steps.Nope.output}}` as written, and `check` said ok."""
    path = home.orchestrators / "main" / "orchestrator.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(PLACEHOLDERS)
    assert main(["--home", str(home.root), "check"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.removeprefix(f"warning: {path}: ") for line in lines[:-1]] == [
        "workflows.build.steps.0.prompt: `{{input.topik}}` names no input of workflow build (inputs: topic); "
        "it would stay as written",
        "workflows.build.steps.0.prompt: `{{steps.Write.output}}` names step Write, which has not run yet at this "
        "step; it would be empty",
        "agents.writer.prompt (used by workflows.build.steps.1): `{{steps.Nope.output}}` names no step of workflow "
        "build (steps: Plan, Write, Ship); it would stay as written",
        "workflows.build.steps.2.command.1: `{{steps.Write.outptu}}` names no field of a step (fields: output, "
        "status, json); it would stay as written"]
    assert lines[-1].startswith("ok: ") and lines[-1].endswith("; 4 warnings")


SCHEDULES = """\
workflows:
  chat: {description: Reply, steps: [{id: Reply, provider: echo}]}
rules: {default_workflow: chat, keyword: {}}
schedules:
  digest: {cron: "0 9 * * *", prompt: hi, workflow: digest, deliver: {profile: console, conversationId: c}}
  ping: {every_sec: 60, prompt: hi, deliver: {profile: telegram-main, conversationId: c}}
  both: {cron: "0 9 * * *", every_sec: 60, prompt: hi, deliver: {profile: console, conversationId: c}}
"""


def test_check_names_every_bad_schedule_in_one_pass(home: Home, capsys: pytest.CaptureFixture[str]) -> None:
    """Three bad schedules: one did not validate (nor did `rules`), which hid the others' unknown workflow and
    deliver profile."""
    path = home.orchestrators / "main" / "orchestrator.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(SCHEDULES)
    assert main(["--home", str(home.root), "check"]) == 2
    assert capsys.readouterr().out.splitlines() == [
        f"{path}: rules.keyword: unknown key; did you mean `keywords`?",
        f"{path}: schedules.both: give exactly one of `cron` and `every_sec`",
        f"{path}: schedules.digest.workflow: unknown workflow 'digest'; workflows: chat",
        f"{path}: schedules.ping.deliver.profile: no channel profile 'telegram-main' in settings.yaml; profiles: "
        "console, web",  # the embedded default's profiles
        "4 problems found"]
