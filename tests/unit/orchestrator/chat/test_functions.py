"""orchestrator/chat/functions.py: command_invoke with validated arguments, built-ins, yaml and plugin functions."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.api import FunctionSpec, HandlerContext
from orchestrator.chat.functions import FunctionRefused, FunctionRegistry
from tests.fakes.orchestrator import ScriptedSelector, make_message

SHOUT = "import json, sys; print(json.load(sys.stdin)['text'].upper())"
CONFIG = f"""
    selector: {{provider: sel}}
    agents: {{a: {{provider: echo}}}}
    workflows:
      chat: {{description: Talk to the bot, steps: [{{id: Reply, agent: a}}]}}
      build: {{description: Build the project, steps: [{{id: Make, command: [echo, built]}}]}}
    functions:
      shout:
        description: Upper-case a text
        parameters: {{type: object, properties: {{text: {{type: string}}}}, required: [text]}}
        command: [{json.dumps(sys.executable)}, -c, {json.dumps(SHOUT)}]
"""


def _spec(name: str, call: Any, parameters: dict[str, Any] | None = None) -> FunctionSpec:
    return FunctionSpec(name, f"the {name} function", parameters or {"type": "object"}, call)


async def test_unknown_function_is_refused_with_the_available_names() -> None:
    registry = FunctionRegistry([_spec("a", lambda args: "A"), _spec("b", lambda args: "B")])
    with pytest.raises(FunctionRefused, match=r"^unknown function 'x'; available: a, b$"):
        await registry.invoke("x", {})


async def test_wrong_argument_type_names_the_argument_and_its_path() -> None:
    schema = {"type": "object", "properties": {"runId": {"type": "string"}}}
    registry = FunctionRegistry([_spec("cancel", lambda args: "", schema)])
    with pytest.raises(FunctionRefused) as caught:
        await registry.invoke("cancel", {"runId": 5})
    assert str(caught.value) == "cancel: argument 'runId' ($.runId): 5 is not of type 'string'"


async def test_nested_argument_path() -> None:
    schema = {"type": "object", "properties": {"opts": {"type": "object", "properties": {
        "n": {"type": "integer", "minimum": 1}}}}}
    registry = FunctionRegistry([_spec("f", lambda args: "", schema)])
    with pytest.raises(FunctionRefused, match=r"argument 'opts.n' \(\$\.opts\.n\): 0 is less than"):
        await registry.invoke("f", {"opts": {"n": 0}})


async def test_missing_argument_and_non_object_arguments() -> None:
    schema = {"type": "object", "required": ["runId"]}
    registry = FunctionRegistry([_spec("cancel", lambda args: "", schema)])
    with pytest.raises(FunctionRefused, match=r"^cancel: arguments: 'runId' is a required property$"):
        await registry.invoke("cancel", {})
    with pytest.raises(FunctionRefused, match="arguments must be a JSON object"):
        await registry.invoke("cancel", ["r-1"])


async def test_first_declaration_of_a_name_wins_and_async_calls_are_awaited() -> None:
    async def later(args: dict[str, Any]) -> str:
        return "later"

    registry = FunctionRegistry([_spec("a", lambda args: "first"), _spec("a", later), _spec("b", later)])
    assert await registry.invoke("a", {}) == "first"
    assert await registry.invoke("b", {}) == "later"


@pytest.fixture
async def invoke(
    selector: ScriptedSelector, make_context: Callable[..., HandlerContext],
    write_config: Callable[[str], Path], start: Callable[[HandlerContext], Any],
) -> Callable[..., Any]:
    """Sends a message whose selector decision is command_invoke(function, arguments)."""
    write_config(CONFIG)

    async def plugin_ping(arguments: dict[str, Any]) -> str:
        return f"pong {arguments.get('n', 0)}"

    context = make_context({"sel": selector.provider},
                           functions=[_spec("ping", plugin_ping), _spec("shout", lambda a: "plugin loses")])
    orchestrator = await start(context)

    async def call(function: str, arguments: Any = None) -> tuple[str, str]:
        selector.answer({"action": "command_invoke", "function": function, "arguments": arguments})
        [answer] = await orchestrator.handle(make_message("do it"))
        return answer.agent, answer.message

    return call


async def test_list_workflows(invoke: Callable[..., Any]) -> None:
    agent, text = await invoke("list_workflows", {})
    assert agent == "list_workflows"
    assert "- chat: Talk to the bot" in text and "- build: Build the project" in text


async def test_queue_stats_uses_the_context_figures(invoke: Callable[..., Any]) -> None:
    agent, text = await invoke("queue_stats")
    assert agent == "queue_stats" and "incoming: 2" in text and "processing: 1" in text


async def test_cancel_run_of_an_unknown_run(invoke: Callable[..., Any]) -> None:
    assert (await invoke("cancel_run", {"runId": "r-nope"}))[1] == "no workflow run 'r-nope' found"


async def test_cancel_run_refuses_bad_arguments(invoke: Callable[..., Any]) -> None:
    agent, text = await invoke("cancel_run", {"runId": 7})
    assert agent == "selector"
    assert text == "I cannot run that: cancel_run: argument 'runId' ($.runId): 7 is not of type 'string'"


async def test_unknown_function_reply_lists_available(invoke: Callable[..., Any]) -> None:
    _, text = await invoke("format_disk", {})
    assert text == ("I cannot run that: unknown function 'format_disk'; available: "
                    "list_workflows, cancel_run, queue_stats, shout, ping")


async def test_yaml_function_gets_arguments_on_stdin(invoke: Callable[..., Any]) -> None:
    assert await invoke("shout", {"text": "hello"}) == ("shout", "HELLO")
    assert "argument" in (await invoke("shout", {"text": 3}))[1]


async def test_plugin_function(invoke: Callable[..., Any]) -> None:
    assert await invoke("ping", {"n": 4}) == ("ping", "pong 4")


async def test_a_function_added_to_orchestrator_yaml_is_available_at_once(
    invoke: Callable[..., Any], write_config: Callable[[str], Path]
) -> None:
    assert (await invoke("whisper", {"text": "HI"}))[1].startswith("I cannot run that: unknown function 'whisper'")
    lower = SHOUT.replace("upper", "lower")
    write_config(CONFIG + f"""
      whisper:
        description: Lower-case a text
        parameters: {{type: object, properties: {{text: {{type: string}}}}, required: [text]}}
        command: [{json.dumps(sys.executable)}, -c, {json.dumps(lower)}]
    """)
    assert await invoke("whisper", {"text": "HI"}) == ("whisper", "hi")
