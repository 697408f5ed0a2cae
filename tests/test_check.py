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
from orchestrator.config import DEFAULT_ORCHESTRATOR_YAML, write_default_orchestrator
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
        f"{path}: selector.provider: unknown provider 'plugged'; known: echo, rules"]
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
        "4 problems found"]
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
    assert capsys.readouterr().out.startswith("ok: ")


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
        "console",
        "4 problems found"]
