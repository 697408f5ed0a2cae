"""The selector's actions: workflow_start, workflow_status, diagnostics_investigate, command_invoke."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from gateway.api import FunctionSpec, PermanentError
from gateway.home import safe_name
from gateway.models import IncomingPayload, Job, OutgoingPayload
from gateway.payloads import STATUS_WORDS
from gateway.telemetry.events import now_ms
from orchestrator.agents.providers import ProviderRunner
from orchestrator.chat.diagnostics import Diagnostics
from orchestrator.chat.functions import (
    FunctionRefused,
    FunctionRegistry,
    builtin_functions,
    config_functions,
    describe_argument_error,
    unknown_run,
)
from orchestrator.chat.selector import Decision
from orchestrator.config.loading import LoadedConfig
from orchestrator.config.models import WorkflowConfig
from orchestrator.execution.executor import RunExecutor
from orchestrator.execution.results import SYSTEM_AGENT, prompt_reply, result_reply, result_text
from orchestrator.runs.base import RunStoreBase
from orchestrator.runs.jobs import JobInfo
from orchestrator.runs.state import Conversation, RunState, StepState, conversation_key, run_id_for
from orchestrator.runs.status import last_run_text, snapshot

SELECTOR_AGENT = "selector"
DIAGNOSTICS_AGENT = "diagnostics"
NO_ACTIVE_RUN = "no active workflow run found for this conversation"
CHANNEL_JOB_FIELDS = frozenset(Job.model_fields) - {"job_id"}
"""The declared `Job` fields a run copies into its spec-003 job record (the run's id is its own)."""


def reply(
    message: IncomingPayload, text: str, *, agent: str, run: RunState | None = None, **extra: Any
) -> OutgoingPayload:
    """A reply to `message`, tagged with a run (its id and current step) when one is concerned."""
    return OutgoingPayload.reply_to(
        message, text, agent=agent, timestamp=now_ms(),
        workflowRunId=run.runId if run else None, workflowStepId=run.currentStep if run else None, **extra,
    )


def new_run(
    message: IncomingPayload, loaded: LoadedConfig, workflow_id: str, data: dict[str, Any],
    run_id: str | None = None, job: Job | None = None,
) -> RunState:
    """A queued run of a workflow, started by `message` (with spec-003 job fields from its channel)."""
    workflow = loaded.config.workflows[workflow_id]
    run_id = run_id or run_id_for(message)
    known = job.model_dump(include=set(CHANNEL_JOB_FIELDS), exclude_none=True) if job is not None else {}
    policy = loaded.config.retry_policy(workflow_id)
    return RunState(
        runId=run_id, workflowId=workflow_id, orchestratorId=loaded.orchestrator_id, input=data,
        message=message.model_dump(mode="json", exclude_none=True),
        conversation=Conversation(channel=message.channel, channelProfileId=message.channelProfileId,
                                  conversationId=message.conversationId, senderId=message.senderId or None),
        steps={step.id: StepState(kind=step.kind, agent=step.agent) for step in workflow.steps},
        job=JobInfo(job_id=run_id, max_retries=policy.max_retries, **known),
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
        self, *, store: RunStoreBase, executor: RunExecutor, diagnostics: Diagnostics, runner: ProviderRunner,
        queue_stats: Callable[[], dict[str, Any]], plugin_functions: list[FunctionSpec],
    ):
        self._store = store
        self._executor = executor
        self._diagnostics = diagnostics
        self._runner = runner
        self._queue_stats = queue_stats
        self._plugin_functions = plugin_functions
        self._registries: dict[str, tuple[LoadedConfig, FunctionRegistry]] = {}

    def registry(self, loaded: LoadedConfig) -> FunctionRegistry:
        """The functions available for this orchestrator: built-ins, then orchestrator.yaml, then
        plugins; built once per loaded configuration (a changed orchestrator.yaml is a new one)."""
        cached = self._registries.get(loaded.orchestrator_id)
        if cached is None or cached[0] is not loaded:
            cached = loaded, FunctionRegistry([
                *builtin_functions(loaded, self._store, self._executor, self._queue_stats),
                *config_functions(loaded, self._runner), *self._plugin_functions,
            ])
            self._registries[loaded.orchestrator_id] = cached
        return cached[1]

    async def execute(
        self, decision: Decision, message: IncomingPayload, loaded: LoadedConfig, functions: FunctionRegistry
    ) -> OutgoingPayload | None:
        """Carries out one selector decision and returns the reply (None: see `_outcome_reply`)."""
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
    ) -> OutgoingPayload | None:
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
        run = self._unrefused(run_id_for(message))
        if run is None:
            run = self._executor.begin(new_run(message, loaded, workflow_id, data), conversation_key(message),
                                       waits=True)
        elif not run.finished:
            self._executor.submit(run.runId)
        return await self._outcome_reply(message, run, loaded.config.reply_within_sec, fresh=True)

    async def _outcome_reply(
        self, message: IncomingPayload, run: RunState, within_sec: float, verb: str = "Started", *,
        fresh: bool = False,
    ) -> OutgoingPayload | None:
        """The reply that waits (briefly) for the run: its result or question, else an ack; None when the
        result was already pushed to the conversation, as only a retried message finds it.

        A message is retried when the gateway died before its reply was written. Each crash window
        gives one answer carrying the result: the run still going after the restart ends either while
        the retried message waits (the result is its reply) or before (the result is pushed, and the
        retry adds nothing, `message.already_answered`); a run that had ended with its result handed
        to the waiting message (`delivery: reply`) gives the retry that result again, since the reply
        was never written; one that had ended undelivered is pushed at the restart, once even if the
        crash came between writing the push and recording it (`Delivery.push`). `fresh`: `run` was read
        or written just now (no await since), so it is not read again.
        """
        ended = await self._executor.outcome(run.runId, within_sec, run if fresh else None)
        if ended is None or not ended.finished:
            self._executor.outlived(ended or run)
        if ended is None and self._executor.delivery.asking(run.runId):
            return None  # its question (a tool approval) is the answer for now; the result is pushed
        if ended is None:
            text = (f"{verb} run {run.runId} (workflow {run.workflowId}). I will post the result here "
                    "when it finishes; send /status for its progress.")
            return reply(message, text, agent=SELECTOR_AGENT, run=run)
        if ended.state == "waiting_input":
            step = ended.steps[ended.currentStep or ""]
            extra = step.model_extra or {}
            if extra.get("promptDelivery") == "reply":
                return prompt_reply(ended, ended.currentStep or "", str(extra.get("prompt", "")), to=message)
            text = f"Run {ended.runId} (workflow {ended.workflowId}) is waiting for your answer (asked above)."
            return reply(message, text, agent=SYSTEM_AGENT, run=ended)
        if ended.delivery == "push":
            self._executor.life.emit("message.already_answered", ended, messageId=message.messageId,
                                     reason="the run's result was pushed to the conversation")
            return None
        if ended.delivery == "told":
            self._executor.life.emit("message.already_answered", ended, messageId=message.messageId,
                                     reason="the /stop that cancelled the run told the conversation")
            return None
        if ended.refused:  # as a refused selector: the sender is told, the message is dead-lettered
            raise PermanentError(f"run {ended.runId}: {ended.error}", reply=result_text(ended))
        return result_reply(ended, to=message)

    @staticmethod
    def answers_input(message: IncomingPayload, run: RunState | None) -> bool:
        """True when the message answers `run` (its resolved run) because that run waits for input."""
        return (run is not None and run.state == "waiting_input"
                and message.message.strip().lower() not in STATUS_WORDS)

    async def answer_input(
        self, message: IncomingPayload, run: RunState, loaded: LoadedConfig
    ) -> OutgoingPayload | None:
        """Resumes a run waiting for input with this message's text; replies with what comes next."""
        resumed = self._executor.answer(run, message)
        if resumed is None:
            raise RuntimeError(f"run {run.runId} is busy in another process; the answer is retried")
        return await self._outcome_reply(message, resumed, loaded.config.reply_within_sec, verb="Resumed")

    @staticmethod
    def answered_input(message: IncomingPayload, run: RunState | None) -> bool:
        """True for a retried message that already answered its conversation's run (`run`)."""
        return run is not None and any((s.model_extra or {}).get("answerMessageId") == message.messageId
                                       for s in run.steps.values())

    async def reattach_answer(
        self, message: IncomingPayload, loaded: LoadedConfig, run: RunState
    ) -> OutgoingPayload | None:
        """For a retried message that already answered `run` (`answered_input`): its reply."""
        self._executor.submit(run.runId)
        return await self._outcome_reply(message, run, loaded.config.reply_within_sec, verb="Resumed")

    def start_job(
        self, message: IncomingPayload, job: Job, loaded: LoadedConfig, workflow_id: str | None
    ) -> OutgoingPayload:
        """Starts a channel-authored job (`message.job`) with the message text as input; no selector."""
        workflows = loaded.config.workflows
        if workflow_id not in workflows:
            text = f"cannot run job: workflow {workflow_id!r} is not defined; workflows: {', '.join(workflows)}"
            return reply(message, text, agent=SYSTEM_AGENT, runState="failed_final", job=job)
        assert workflow_id is not None
        asks = [step.id for step in workflows[workflow_id].steps if step.kind == "input"]
        if asks:  # nobody could answer: the file's author is not in a conversation
            text = (f"cannot run job: workflow {workflow_id!r} asks for input (step {asks[0]}), which a job "
                    "from a file cannot answer; give the inbox a workflow without input steps")
            return reply(message, text, agent=SYSTEM_AGENT, runState="failed_final", job=job)
        run_id = job.job_id or ""
        run_id = run_id if run_id and safe_name(run_id) == run_id else run_id_for(message)
        run = self._unrefused(run_id)
        if run is None:
            data = {"text": message.message, **job.input_fields()}
            run = new_run(message, loaded, workflow_id, data, run_id=run_id, job=job)
            run = self._executor.begin(run, conversation_key(message), announced=bool(job.job_id))
        elif not run.finished:
            self._executor.submit(run.runId)
        return reply(message, f"Queued job {run.runId} (workflow {run.workflowId}).", agent=SYSTEM_AGENT, run=run)

    def resolve_run(self, message: IncomingPayload) -> RunState | None:
        """The run a message is about: the one its workflowRunId names, else its conversation's active run."""
        if message.workflowRunId:
            return self._store.load(message.workflowRunId)
        return self._store.active_for(conversation_key(message))

    def current_run(self, message: IncomingPayload) -> RunState | None:
        """The run a command about what runs now (`/status`, `/stop`) is about: `current_and_last`'s first."""
        return self.current_and_last(message)[0]

    def current_and_last(self, message: IncomingPayload) -> tuple[RunState | None, RunState | None]:
        """(the run a command about what runs now is about, the conversation's last run): the run named,
        else the conversation's active run, else its newest run while unfinished — a run its starting
        message still waits for is not the active run yet (RunExecutor.begin), and a command runs beside
        that message (gateway.payloads). The last run is looked up only when there is no current one."""
        run = self.resolve_run(message)
        if run is not None or message.workflowRunId:
            return run, None
        last = self._store.last_for(conversation_key(message))
        return (last, None) if last is not None and not last.finished else (None, last)

    def workflow_status(self, message: IncomingPayload, *, agent: str) -> OutgoingPayload:
        """The progress snapshot of the current run, or the fixed no-active-run text with, on a line of its
        own, how the conversation's last run ended; advances nothing."""
        run, last = self.current_and_last(message)
        if run is not None:
            return reply(message, self.snapshot_text(run), agent=agent, run=run)
        return reply(message, NO_ACTIVE_RUN if last is None else f"{NO_ACTIVE_RUN}\n{last_run_text(last)}",
                     agent=agent)

    def snapshot_text(self, run: RunState) -> str:
        """The run's progress snapshot with its last event."""
        events = self._store.events(run.runId, limit=1)
        return snapshot(run, events[-1] if events else None)

    def _unrefused(self, run_id: str) -> RunState | None:
        """The stored run of `run_id`; None for none, and for a refused one, removed: its message came back
        (`dead retry` of its dead letter), so it runs afresh."""
        run = self._store.load(run_id)
        if run is not None and run.refused:
            self._store.remove(run.runId)
            return None
        return run

    def run_snapshot(self, message: IncomingPayload, run_id: str, note: str = "") -> OutgoingPayload:
        """The snapshot of one named run (the status fast path); advances nothing."""
        run = self._store.load(run_id)
        if run is None:
            return reply(message, unknown_run(run_id), agent=SYSTEM_AGENT)
        return reply(message, self.snapshot_text(run) + note, agent=SYSTEM_AGENT, run=run)

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
            text = await functions.invoke(str(name), {} if arguments is None else arguments, message)
        except FunctionRefused as exc:
            return reply(message, f"I cannot run that: {exc}", agent=SELECTOR_AGENT)
        return reply(message, text, agent=str(name))
