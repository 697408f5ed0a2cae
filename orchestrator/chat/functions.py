"""The functions `command_invoke` may call (built-ins, orchestrator.yaml, plugins) and their checks."""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match

from gateway.api import FunctionSpec
from gateway.models import IncomingPayload
from gateway.scope import ConversationScope
from orchestrator.agents.providers import ProviderRunner
from orchestrator.agents.spawn import ProviderFailed
from orchestrator.config.loading import LoadedConfig
from orchestrator.config.models import FunctionConfig
from orchestrator.execution.executor import RunExecutor
from orchestrator.runs.base import RunStoreBase
from orchestrator.runs.state import RunState, belongs_to

FUNCTION_MAX_OUTPUT = 65536
COMMANDS_HELP = ("Commands: /status (this conversation's run), /stop (stop what runs now: the agent's answer "
                 "and the run; /cancel does the same), /usage (what you spent, and your limits), /help (this list), "
                 "/new (a fresh agent session), /sessions (this conversation's), /resume N (back to one), "
                 "/reminders (this conversation's; /reminders cancel N).")


class FunctionRefused(Exception):
    """A function call was refused: unknown function or invalid arguments (the message says which)."""


def describe_argument_error(name: str, error: ValidationError, noun: str = "argument") -> str:
    """Names the failing argument with its JSON path, e.g. `argument 'runId' ($.runId): 5 is not …`."""
    path = ".".join(str(part) for part in error.absolute_path)
    where = f"{noun} '{path}' ({error.json_path})" if path else f"{noun}s"
    return f"{name}: {where}: {error.message}"


@functools.lru_cache(maxsize=256)
def _validator(schema: str) -> Draft202012Validator:
    """A compiled validator per distinct schema (building one costs far more than using it)."""
    return Draft202012Validator(json.loads(schema))


def validate_arguments(spec: FunctionSpec, arguments: Any) -> dict[str, Any]:
    """Checks arguments against the function's JSON Schema (Draft 2020-12); raises FunctionRefused."""
    if not isinstance(arguments, dict):
        raise FunctionRefused(f"{spec.name}: arguments must be a JSON object")
    error = best_match(_validator(json.dumps(spec.parameters, sort_keys=True)).iter_errors(arguments))
    if error is not None:
        raise FunctionRefused(describe_argument_error(spec.name, error))
    return arguments


AskedCall = Callable[[dict[str, Any], IncomingPayload | None], Awaitable[str]]
"""A built-in's call that also gets the asking message (None: no conversation, e.g. a test)."""


@dataclass(frozen=True)
class AskedFunction:
    """A built-in that acts for the asking conversation only (`cancel_run`): its call gets the message."""

    name: str
    description: str
    parameters: dict[str, Any]
    call: AskedCall

    def spec(self) -> FunctionSpec:
        """Its description for the selector (the registry calls `call` itself, with the message)."""
        return FunctionSpec(self.name, self.description, self.parameters, self._unasked)

    async def _unasked(self, arguments: dict[str, Any]) -> str:
        return await self.call(arguments, None)


class FunctionRegistry:
    """The available functions by name; the first one declared under a name wins."""

    def __init__(self, specs: Iterable[FunctionSpec | AskedFunction]):
        self._specs: dict[str, FunctionSpec] = {}
        self._asked: dict[str, AskedCall] = {}
        for spec in specs:
            if spec.name in self._specs:
                continue
            if isinstance(spec, AskedFunction):
                self._asked[spec.name] = spec.call
                spec = spec.spec()
            self._specs[spec.name] = spec
        self._described = [{"name": s.name, "description": s.description, "parameters": s.parameters}
                           for s in self._specs.values()]

    def describe(self) -> list[dict[str, Any]]:
        """The `availableFunctions` of a selector request (one shared list: read it, do not change it)."""
        return self._described

    async def invoke(self, name: str, arguments: Any, message: IncomingPayload | None = None) -> str:
        """Calls one function with validated arguments for the asking `message`; raises FunctionRefused
        when it may not run."""
        spec = self._specs.get(name)
        if spec is None:
            raise FunctionRefused(f"unknown function {name!r}; available: {', '.join(self._specs)}")
        arguments = validate_arguments(spec, arguments)
        asked = self._asked.get(name)
        result = asked(arguments, message) if asked is not None else spec.call(arguments)
        if inspect.isawaitable(result):
            result = await result
        return str(result)


def workflow_listing(loaded: LoadedConfig) -> str:
    """The workflows a user can start, with their descriptions, and the built-in commands."""
    lines = ["Workflows you can start:"]
    lines += [f"- {wid}: {w.description}" for wid, w in loaded.config.workflows.items()] or ["- (none)"]
    return "\n".join([*lines, COMMANDS_HELP])


def builtin_functions(
    loaded: LoadedConfig, store: RunStoreBase, executor: RunExecutor, queue_stats: Callable[[], dict[str, Any]]
) -> list[FunctionSpec | AskedFunction]:
    """list_workflows, cancel_run and queue_stats, which every orchestrator has. cancel_run cancels
    only a run of the asking conversation: another one's run is answered as an unknown id."""

    def list_workflows(arguments: dict[str, Any]) -> str:
        return workflow_listing(loaded)

    async def cancel_run(arguments: dict[str, Any], message: IncomingPayload | None) -> str:
        run_id = str(arguments["runId"])
        run = store.load(run_id)
        if run is None or message is None or not belongs_to(run, message):
            return unknown_run(run_id)
        text = await cancel_text(store, executor, run_id, told=True)  # this reply says it, not the run's result
        return text or f"Cancelled run {run_id} (workflow {run.workflowId})."  # (another host's result says so too)

    def stats(arguments: dict[str, Any]) -> str:
        figures = queue_stats()
        return "Queue:\n" + "\n".join(f"- {key}: {json.dumps(value)}" for key, value in figures.items())

    return [
        FunctionSpec("list_workflows", "List the workflows that can be started", {"type": "object"},
                     list_workflows),
        AskedFunction("cancel_run", "Cancel a workflow run of this conversation", {
            "type": "object", "properties": {"runId": {"type": "string", "minLength": 1}},
            "required": ["runId"], "additionalProperties": False,
        }, cancel_run),
        FunctionSpec("queue_stats", "Show how many messages wait in each queue folder", {"type": "object"},
                     stats),
    ]


def unknown_run(run_id: str) -> str:
    """The answer about a run id that names no run (or, to a chat user, another conversation's run)."""
    return f"no workflow run {run_id!r} found"


async def cancel_text(
    store: RunStoreBase, executor: RunExecutor, run_id: str, *, before: RunState | None = None, told: bool = False
) -> str | None:
    """Cancels a run and says what happened (`before`: the run as it was read before a `/stop`, which may
    have ended it cancelled already). `told`: the text goes to the run's own conversation, so the run's
    result is not sent as well; None then when the process executing the run elsewhere cancelled it and
    sends that result itself, which is the one answer."""
    before = before or store.load(run_id)
    if before is None:
        return unknown_run(run_id)
    if before.finished:
        return f"Run {run_id} (workflow {before.workflowId}) is already {before.state}; nothing to cancel."
    after, elsewhere = await executor.cancel(run_id, told=told)
    state = after.state if after else "unknown"
    if state == "cancelled" and told and elsewhere:
        return None
    return f"Cancelled run {run_id} (workflow {before.workflowId})." if state == "cancelled" else (
        f"Run {run_id} (workflow {before.workflowId}) ended as {state} before it could be cancelled.")


def config_functions(loaded: LoadedConfig, runner: ProviderRunner) -> list[AskedFunction]:
    """The functions orchestrator.yaml declares: argv run with the arguments as JSON on stdin (a turn of the
    asking conversation, which its `/stop` stops: TurnStopped)."""
    return [AskedFunction(name, fc.description, fc.parameters, _command_call(name, fc, loaded, runner))
            for name, fc in loaded.config.functions.items()]


def _command_call(name: str, function: FunctionConfig, loaded: LoadedConfig, runner: ProviderRunner) -> AskedCall:
    async def call(arguments: dict[str, Any], message: IncomingPayload | None) -> str:
        turn = ConversationScope.of(message).key if message is not None else None
        try:
            result = await runner.run_command(
                name, function.command, stdin=json.dumps(arguments), cwd=loaded.workspace,
                timeout_sec=function.timeout_sec, max_output=FUNCTION_MAX_OUTPUT, turn=turn,
            )
        except ProviderFailed as exc:
            return f"Function {name} failed: {exc}"
        return result.stdout.strip() or f"Function {name} finished (no output)."

    return call
