"""The selector's actions: workflow_start, workflow_status, diagnostics_investigate, command_invoke."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from gateway.api import FunctionSpec
from gateway.events import now_ms
from gateway.models import IncomingPayload, OutgoingPayload
from orchestrator.config import LoadedConfig, WorkflowConfig
from orchestrator.diagnostics import Diagnostics
from orchestrator.executor import SYSTEM_AGENT, RunExecutor, result_reply
from orchestrator.functions import (
    FunctionRefused,
    FunctionRegistry,
    builtin_functions,
    config_functions,
    describe_argument_error,
)
from orchestrator.providers import ProviderRunner
from orchestrator.runs import (
    Conversation,
    RunState,
    RunStore,
    StepState,
    conversation_key,
    run_id_for,
    snapshot,
)
from orchestrator.selector import Decision

SELECTOR_AGENT = "selector"
DIAGNOSTICS_AGENT = "diagnostics"
NO_ACTIVE_RUN = "no active workflow run found for this conversation"


def reply(message: IncomingPayload, text: str, *, agent: str, run: RunState | None = None) -> OutgoingPayload:
    """A reply to `message`, tagged with a run (its id and current step) when one is concerned."""
    return OutgoingPayload.reply_to(
        message, text, agent=agent, timestamp=now_ms(),
        workflowRunId=run.runId if run else None, workflowStepId=run.currentStep if run else None,
    )


def new_run(
    message: IncomingPayload, loaded: LoadedConfig, workflow_id: str, data: dict[str, Any]
) -> RunState:
    """A queued run of a workflow, started by `message`."""
    workflow = loaded.config.workflows[workflow_id]
    return RunState(
        runId=run_id_for(message), workflowId=workflow_id, orchestratorId=loaded.orchestrator_id, input=data,
        message=message.model_dump(mode="json", exclude_none=True),
        conversation=Conversation(channel=message.channel, channelProfileId=message.channelProfileId,
                                  conversationId=message.conversationId, senderId=message.senderId or None),
        steps={step.id: StepState(kind=step.kind, agent=step.agent) for step in workflow.steps},
    )


def input_problem(workflow_id: str, workflow: WorkflowConfig, data: Any) -> str | None:
    """Why a workflow_start input is unacceptable, or None."""
    if not isinstance(data, dict):
        return f"workflow {workflow_id}: input must be a JSON object"
    if workflow.inputs is None:
        return None
    error = best_match(Draft202012Validator(workflow.inputs).iter_errors(data))
    return None if error is None else describe_argument_error(f"workflow {workflow_id}", error, "input")


class Actions:
    """Executes decisions and the built-in commands that share their logic."""

    def __init__(
        self, *, store: RunStore, executor: RunExecutor, diagnostics: Diagnostics, runner: ProviderRunner,
        queue_stats: Callable[[], dict[str, Any]], plugin_functions: list[FunctionSpec],
    ):
        self._store = store
        self._executor = executor
        self._diagnostics = diagnostics
        self._runner = runner
        self._queue_stats = queue_stats
        self._plugin_functions = plugin_functions

    def registry(self, loaded: LoadedConfig) -> FunctionRegistry:
        """The functions available for this orchestrator: built-ins, then orchestrator.yaml, then plugins."""
        return FunctionRegistry([
            *builtin_functions(loaded, self._store, self._executor, self._queue_stats),
            *config_functions(loaded, self._runner), *self._plugin_functions,
        ])

    async def execute(
        self, decision: Decision, message: IncomingPayload, loaded: LoadedConfig, functions: FunctionRegistry
    ) -> OutgoingPayload:
        """Carries out one selector decision and returns the reply."""
        fields = decision.fields
        if decision.action == "workflow_start":
            return await self.workflow_start(message, loaded, fields.get("workflowId"), fields.get("input"))
        if decision.action == "workflow_status":
            return self.workflow_status(message, agent=SELECTOR_AGENT)
        if decision.action == "diagnostics_investigate":
            question = str(fields.get("question") or message.message)
            return await self.diagnostics_investigate(message, loaded, question, decision.request_id)
        return await self.command_invoke(message, functions, fields.get("function"), fields.get("arguments"))

    async def workflow_start(
        self, message: IncomingPayload, loaded: LoadedConfig, workflow_id: Any, data: Any
    ) -> OutgoingPayload:
        """Starts (or, for a retried message, re-attaches to) a run; replies with its result or an ack."""
        workflows = loaded.config.workflows
        if not isinstance(workflow_id, str) or workflow_id not in workflows:
            listing = ", ".join(workflows) or "(none)"
            return reply(message, f"I cannot start workflow {workflow_id!r}: there is no such workflow. "
                                  f"Workflows: {listing}.", agent=SELECTOR_AGENT)
        data = {} if data is None else data
        problem = input_problem(workflow_id, workflows[workflow_id], data)
        if problem is not None:
            return reply(message, f"I cannot start that workflow: {problem}", agent=SELECTOR_AGENT)
        run = self._store.load(run_id_for(message))
        if run is None:
            run = self._executor.begin(new_run(message, loaded, workflow_id, data), conversation_key(message))
        elif not run.finished:
            self._executor.submit(run.runId)
        return await self._outcome_reply(message, run, loaded.config.reply_within_sec)

    async def _outcome_reply(
        self, message: IncomingPayload, run: RunState, within_sec: float
    ) -> OutgoingPayload:
        ended = await self._executor.outcome(run.runId, within_sec)
        if ended is None:
            text = (f"Started run {run.runId} (workflow {run.workflowId}). I will post the result here "
                    "when it finishes; send /status for its progress.")
            return reply(message, text, agent=SELECTOR_AGENT, run=run)
        if ended.delivery == "push":
            text = (f"Run {ended.runId} (workflow {ended.workflowId}) already finished; its result was sent "
                    "to this conversation.")
            return reply(message, text, agent=SYSTEM_AGENT, run=ended)
        return result_reply(ended)

    def resolve_run(self, message: IncomingPayload) -> RunState | None:
        """The run a message is about: the one its workflowRunId names, else its conversation's active run."""
        if message.workflowRunId:
            return self._store.load(message.workflowRunId)
        return self._store.active_for(conversation_key(message))

    def workflow_status(self, message: IncomingPayload, *, agent: str) -> OutgoingPayload:
        """The progress snapshot of the resolved run, or the fixed no-active-run text; advances nothing."""
        run = self.resolve_run(message)
        if run is None:
            return reply(message, NO_ACTIVE_RUN, agent=agent)
        return reply(message, snapshot(run), agent=agent, run=run)

    def run_snapshot(self, message: IncomingPayload, run_id: str, note: str = "") -> OutgoingPayload:
        """The snapshot of one named run (the status fast path); advances nothing."""
        run = self._store.load(run_id)
        if run is None:
            return reply(message, f"no workflow run {run_id!r} found", agent=SYSTEM_AGENT)
        return reply(message, snapshot(run) + note, agent=SYSTEM_AGENT, run=run)

    async def diagnostics_investigate(
        self, message: IncomingPayload, loaded: LoadedConfig, question: str, request_id: str
    ) -> OutgoingPayload:
        """The diagnostics agent's findings about the resolved run or conversation; advances nothing."""
        run = self.resolve_run(message)
        answer = await self._diagnostics.investigate(question, message, run, loaded, request_id)
        return reply(message, answer, agent=DIAGNOSTICS_AGENT, run=run)

    async def command_invoke(
        self, message: IncomingPayload, functions: FunctionRegistry, name: Any, arguments: Any
    ) -> OutgoingPayload:
        """Runs one available function with validated arguments, or explains the refusal."""
        try:
            text = await functions.invoke(str(name), {} if arguments is None else arguments)
        except FunctionRefused as exc:
            return reply(message, f"I cannot run that: {exc}", agent=SELECTOR_AGENT)
        return reply(message, text, agent=str(name))
