"""orchestrator/config/models.py: loading orchestrator.yaml with errors that name the key."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from gateway.home import Home
from gateway.settings import Settings, SettingsError
from gateway.telemetry.events import EventLog, read_events
from orchestrator.config.cache import ConfigCache
from orchestrator.config.default import DEFAULT_ORCHESTRATOR_YAML, write_default_orchestrator
from orchestrator.config.loading import load_every_config, load_orchestrator_config

BUILTINS = {"echo", "rules", "demo"}  # orchestrator.agents.builtin.builtin_providers()


def test_missing_file_means_the_embedded_default(tmp_path: Path) -> None:
    config = load_orchestrator_config(tmp_path, BUILTINS)
    assert config.selector.provider == "rules"
    assert config.diagnostics.provider == "rules"
    assert config.reply_within_sec == 20
    assert config.agents["echo"].prompt == "You said: {{message}}"
    assert [s.id for s in config.workflows["chat"].steps] == ["Reply"]
    assert [s.kind for s in config.workflows["demo"].steps] == ["agent", "command"]
    assert config.rules.default_workflow == "chat"


def test_default_yaml_is_commented_and_needs_only_builtins() -> None:
    assert DEFAULT_ORCHESTRATOR_YAML.count("\n#") >= 5
    assert yaml.safe_load(DEFAULT_ORCHESTRATOR_YAML)["selector"] == {"provider": "rules"}


def test_write_default_never_overwrites(tmp_path: Path) -> None:
    path = write_default_orchestrator(tmp_path / "ws")
    assert path.read_text() == DEFAULT_ORCHESTRATOR_YAML
    path.write_text("reply_within_sec: 3\n")
    assert write_default_orchestrator(tmp_path / "ws") == path
    assert path.read_text() == "reply_within_sec: 3\n"


def _load(write_config: Callable[[str], Path], text: str, providers: set[str] = BUILTINS) -> str:
    path = write_config(text)
    with pytest.raises(SettingsError) as caught:
        load_orchestrator_config(path.parent, providers)
    message = str(caught.value)
    assert message.startswith(str(path))
    return message


def test_error_names_the_step_key(write_config: Callable[[str], Path]) -> None:
    message = _load(write_config, """
        agents: {a: {provider: echo}}
        workflows: {build: {steps: [{id: Plan, agent: 7}]}}
    """)
    assert "workflows.build.steps.0.agent" in message


def test_unknown_agent_is_named(write_config: Callable[[str], Path]) -> None:
    message = _load(write_config, """
        agents: {a: {provider: echo}}
        workflows: {build: {steps: [{id: Plan, agent: planner}]}}
    """)
    assert "workflows.build.steps.0.agent: unknown agent 'planner'; agents: a" in message


def test_unknown_provider_is_named_with_the_known_ones(write_config: Callable[[str], Path]) -> None:
    message = _load(write_config, "agents: {a: {provider: claude}}\n")
    assert "agents.a.provider: unknown provider 'claude'; known: demo, echo, rules" in message


def test_unknown_selector_provider(write_config: Callable[[str], Path]) -> None:
    assert "selector.provider: unknown provider 'gpt'" in _load(write_config, "selector: {provider: gpt}\n")


def test_settings_providers_are_known(write_config: Callable[[str], Path]) -> None:
    path = write_config("selector: {provider: claude}\n")
    assert load_orchestrator_config(path.parent, BUILTINS | {"claude"}).selector.provider == "claude"


def test_step_needs_exactly_one_kind(write_config: Callable[[str], Path]) -> None:
    message = _load(write_config, "workflows: {w: {steps: [{id: S}]}}\n")
    assert "step S: needs exactly one of agent, command, wait_for, for_each or input" in message


def test_unknown_key_is_named(write_config: Callable[[str], Path]) -> None:
    assert "selectr" in _load(write_config, "selectr: {provider: rules}\n")


def test_duplicate_step_ids(write_config: Callable[[str], Path]) -> None:
    message = _load(write_config, "workflows: {w: {steps: [{id: A, command: [x]}, {id: A, command: [y]}]}}\n")
    assert "workflows.w" in message and "duplicate step id 'A'" in message


def test_rules_must_name_existing_workflows(write_config: Callable[[str], Path]) -> None:
    message = _load(write_config, "rules: {default_workflow: nope}\n")
    assert "rules.default_workflow: unknown workflow 'nope'" in message


def test_function_parameters_must_be_a_schema(write_config: Callable[[str], Path]) -> None:
    message = _load(write_config, "functions: {f: {command: [x], parameters: {type: 12}}}\n")
    assert "functions.f" in message and "not a valid JSON Schema" in message


def test_cache_reloads_when_the_file_changes(home: Home, write_config: Callable[[str], Path]) -> None:
    cache = ConfigCache(home, Settings(), BUILTINS)
    assert cache.get("main").config.reply_within_sec == 20
    write_config("reply_within_sec: 3\n")
    assert cache.get("main").config.reply_within_sec == 3
    assert cache.get("main") is cache.get("main")


def test_an_edit_that_does_not_validate_leaves_the_last_valid_config_in_use(
        home: Home, write_config: Callable[[str], Path], events: EventLog, caplog: pytest.LogCaptureFixture) -> None:
    cache = ConfigCache(home, Settings(), BUILTINS, events=events)
    write_config("reply_within_sec: 3\n")
    assert cache.get("main").config.reply_within_sec == 3
    path = write_config("reply_within_sec: 4\nagents: {a: {provider: nope}}\n")
    with caplog.at_level(logging.WARNING, logger="switchyard.orchestrator"):
        assert cache.get("main").config.reply_within_sec == 3
        assert cache.get("main").config.reply_within_sec == 3  # the same broken version is reported once
    [rejected] = [e for e in read_events(home.events_file) if e["event"] == "orchestrator.config_rejected"]
    assert rejected["orchestrator"] == "main" and f"{path}: agents.a.provider: unknown provider 'nope'" in rejected[
        "reason"]
    [record] = [r for r in caplog.records if "last valid configuration stays in use" in r.getMessage()]
    assert record.levelno == logging.WARNING and "agents.a.provider" in record.getMessage()
    write_config("reply_within_sec: 5\n")
    assert cache.get("main").config.reply_within_sec == 5
    assert [e["event"] for e in read_events(home.events_file)][-1] == "orchestrator.config_reloaded"


def test_a_file_that_never_validated_is_an_error(home: Home, write_config: Callable[[str], Path]) -> None:
    write_config("agents: {a: {provider: nope}}\n")
    with pytest.raises(SettingsError, match="agents.a.provider: unknown provider"):
        ConfigCache(home, Settings(), BUILTINS).get("main")


def test_every_orchestrator_is_loaded_and_each_problem_named_on_its_own_line(home: Home) -> None:
    settings = Settings.model_validate({"orchestrators": {"main": {"workspace": "orchestrators/main"},
                                                          "ops": {"workspace": "orchestrators/ops"}}})
    (home.root / "orchestrators" / "ops").mkdir(parents=True)
    path = home.root / "orchestrators" / "ops" / "orchestrator.yaml"
    path.write_text("selector: {provider: ghost}\nagents: {a: {provider: echo, promt: x}}\n")
    loaded, problems = load_every_config(home, settings, BUILTINS)
    assert [config.orchestrator_id for config in loaded] == ["main"]
    assert problems == [f"{path}: agents.a.promt: unknown key; did you mean `prompt`?",
                        f"{path}: selector.provider: unknown provider 'ghost'; known: demo, echo, rules"]
    path.write_text("selector: {provider: ghost}\nrules: {default_workflow: nope}\n")
    assert load_every_config(home, settings, BUILTINS)[1] == [
        f"{path}: rules.default_workflow: unknown workflow 'nope'; workflows: (none)",
        f"{path}: selector.provider: unknown provider 'ghost'; known: demo, echo, rules"]
