"""gateway/check.py: the problems of a home, gathered from the settings checks and every plugin's own."""

from __future__ import annotations

from typing import Any

import pytest

from gateway import hookimpl
from gateway.api import BuiltinProvider
from gateway.check import home_problems, require_valid_home
from gateway.home import Home
from gateway.plugin_manager import build_plugin_manager
from gateway.settings import Settings, SettingsError


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
    assert caught.value.problems == ["s.yaml: channels.0 (beat): intervall_sec: Extra inputs are not permitted",
                                     f"{home.root / 'plugged.yaml'}: (file): missing"]
    assert str(caught.value).startswith("2 problems:\n  s.yaml: channels.0 (beat): intervall_sec")
