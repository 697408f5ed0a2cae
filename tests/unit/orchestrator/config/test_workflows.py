"""orchestrator/config/workflows.py: step kinds, their exclusivity and the version gate, checked at load time."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from gateway.settings import SettingsError
from orchestrator.config.default import DEFAULT_ORCHESTRATOR_YAML
from orchestrator.config.loading import load_orchestrator_config, parse_orchestrator_config

BUILTINS = {"echo", "rules", "demo"}
EXAMPLES = Path(__file__).resolve().parents[4] / "examples"


def _error(write_config: Callable[[str], Path], text: str) -> str:
    path = write_config(text)
    with pytest.raises(SettingsError) as caught:
        load_orchestrator_config(path.parent, BUILTINS)
    return str(caught.value)


@pytest.mark.parametrize("other", ["command: [make]", "provider: echo", "for_each: {items: '[1]'}, do: {command: [x]}"])
def test_wait_for_mixed_with_another_kind_is_rejected_naming_the_step(
    write_config: Callable[[str], Path], other: str
) -> None:
    step = f"{{id: Gate, wait_for: {{glob: '*.task'}}, {other}}}"
    message = _error(write_config, f"workflows: {{w: {{steps: [{step}]}}}}\n")
    assert "workflows.w.steps.0" in message
    assert "step Gate: wait_for is mutually exclusive with command/provider/for_each" in message


def test_every_step_kind_loads(write_config: Callable[[str], Path]) -> None:
    path = write_config("""
        agents: {a: {provider: echo}}
        workflows:
          w:
            steps:
              - {id: A, agent: a}
              - {id: P, provider: echo, prompt: "hi {{message}}"}
              - {id: C, command: [echo, hi]}
              - {id: W, wait_for: {glob: "inbox/qa/*.task"}}
              - {id: F, for_each: {items: "{{steps.A.output}}", parallel: 3}, do: {agent: a}}
              - {id: I, input: {prompt: "Which branch?"}}
    """)
    steps = load_orchestrator_config(path.parent, BUILTINS).workflows["w"].steps
    assert [s.kind for s in steps] == ["agent", "agent", "command", "wait_for", "for_each", "input"]
    wait = steps[3].wait_for
    assert wait is not None and (wait.timeout_sec, wait.poll_ms, wait.min_count) == (300, 500, 1)


@pytest.mark.parametrize(("step", "problem"), [
    ("{id: F, for_each: {items: '[1]'}}", "step F: `do` (the sub-step run per item) goes with `for_each`"),
    ("{id: F, command: [x], do: {command: [y]}}", "step F: `do` (the sub-step run per item) goes with `for_each`"),
    ("{id: F, for_each: {items: '[1]', glob: '*'}, do: {command: [x]}}", "exactly one of `items` or `glob`"),
    ("{id: F, for_each: {items: '[1]'}, do: {agent: a, command: [x]}}", "step F: do: needs exactly one of"),
    ("{id: F, agent: a, prompt: hi}", "step F: `prompt` goes with `provider`"),
    ("{id: F, input: {prompt: ''}}", "workflows.w.steps.0.input.prompt"),
    ("{id: F, agent: a, command: [x]}", "needs exactly one of agent, command, wait_for, for_each or input"),
])
def test_malformed_steps_are_named(write_config: Callable[[str], Path], step: str, problem: str) -> None:
    text = f"agents: {{a: {{provider: echo}}}}\nworkflows: {{w: {{steps: [{step}]}}}}\n"
    assert problem in _error(write_config, text)


def test_unknown_agent_inside_do_is_named(write_config: Callable[[str], Path]) -> None:
    message = _error(write_config, "workflows: {w: {steps: [{id: F, for_each: {items: '[1]'}, do: {agent: nope}}]}}\n")
    assert "workflows.w.steps.0.do.agent: unknown agent 'nope'" in message


def test_on_item_complete_needs_version_1_2(write_config: Callable[[str], Path]) -> None:
    step = "{id: Each, for_each: {glob: 'inbox/*.task', on_item_complete: {}}, do: {command: [cat]}}"
    message = _error(write_config, f"workflows: {{w: {{steps: [{step}]}}}}\n")
    assert "workflows.w.steps.0 (Each): for_each.on_item_complete needs `version: 1.2`" in message
    path = write_config(f"version: 1.2\nworkflows: {{w: {{steps: [{step}]}}}}\n")
    moves = load_orchestrator_config(path.parent, BUILTINS).workflows["w"].steps[0].for_each
    assert moves is not None and moves.on_item_complete is not None
    assert moves.on_item_complete.success == "processed/{timestamp}/"


def test_on_item_complete_needs_glob_items(write_config: Callable[[str], Path]) -> None:
    step = "{id: Each, for_each: {items: '[1]', on_item_complete: {}}, do: {command: [cat]}}"
    assert "needs `glob` items" in _error(write_config, f"version: 1.2\nworkflows: {{w: {{steps: [{step}]}}}}\n")


def test_retry_settings_with_a_workflow_override(write_config: Callable[[str], Path]) -> None:
    path = write_config("""
        max_retries: 3
        retry_backoff_sec: 1
        workflows:
          a: {steps: [{id: S, command: [x]}]}
          b: {max_retries: 0, steps: [{id: S, command: [x], on_failure: fatal}]}
    """)
    config = load_orchestrator_config(path.parent, BUILTINS)
    assert config.retry_policy("a").max_retries == 3 and config.retry_policy("b").max_retries == 0
    assert config.workflows["b"].steps[0].on_failure == "fatal"


def test_the_commented_example_in_the_default_file_loads() -> None:
    lines = DEFAULT_ORCHESTRATOR_YAML.splitlines()
    start = lines.index("  # review:")
    block = []
    for line in lines[start:]:
        if not line.startswith("  # "):
            break
        block.append(line.replace("# ", "", 1))
    data = yaml.safe_load(DEFAULT_ORCHESTRATOR_YAML)
    data["workflows"].update(yaml.safe_load("\n".join(block)))
    config = parse_orchestrator_config(data, "default", BUILTINS)
    assert [s.kind for s in config.workflows["review"].steps] == ["wait_for", "for_each", "input", "command"]


def test_the_examples_load_with_the_builtin_providers() -> None:
    data = yaml.safe_load((EXAMPLES / "orchestrator.yaml").read_text())
    config = parse_orchestrator_config(data, "examples/orchestrator.yaml", BUILTINS)
    kinds = [s.kind for s in config.workflows["tasks"].steps]
    assert kinds == ["agent", "for_each", "wait_for", "for_each", "input", "agent"]
