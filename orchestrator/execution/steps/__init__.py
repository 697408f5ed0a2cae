"""Step kinds: agent, command, wait_for, for_each and input, behind one StepRunner."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from gateway.api import Outbox
from gateway.settings import SettingsError
from gateway.telemetry import tracing
from orchestrator.agents.providers import ProviderRunner
from orchestrator.config.loading import LoadedConfig
from orchestrator.config.models import StepConfig
from orchestrator.execution.steps.base import Progress, StepFailed, StepJob, StepOutcome
from orchestrator.execution.steps.foreach import ForEach
from orchestrator.execution.steps.process import BodyRunner
from orchestrator.execution.steps.values import template_values
from orchestrator.execution.steps.wait import wait_for
from orchestrator.execution.templates import render
from orchestrator.runs.base import RunStoreBase
from orchestrator.runs.jobs import RetryPolicy
from orchestrator.runs.state import RunState

if TYPE_CHECKING:
    from orchestrator.chat.approvals import ApprovalBroker

__all__ = ["StepFailed", "StepOutcome", "StepRunner"]


class StepRunner:
    """Looks steps up in the current orchestrator.yaml and runs them."""

    def __init__(
        self, runner: ProviderRunner, store: RunStoreBase, configs: Callable[[str], LoadedConfig],
        outbox: Outbox | None = None, approvals: ApprovalBroker | None = None, *,
        on_ask: Callable[[str], None] | None = None,
    ):
        """`on_ask(run_id)` is called when a step of a run asks its conversation to approve a tool call."""
        self._store = store
        self._runner = runner
        self._configs = configs
        self._bodies = BodyRunner(runner, store, outbox, approvals, on_ask=on_ask)
        self._for_each = ForEach(self._bodies)

    def lookup(self, run: RunState, step_id: str) -> tuple[LoadedConfig, StepConfig]:
        """The configuration of a run's step; raises a fatal StepFailed when it cannot be found."""
        try:
            loaded = self._configs(run.orchestratorId)
        except SettingsError as exc:
            raise StepFailed(f"orchestrator configuration: {exc}", category="fatal") from exc
        workflow = loaded.config.workflows.get(run.workflowId)
        step = workflow.step(step_id) if workflow is not None else None
        if step is None:
            raise StepFailed(f"step {step_id} is no longer in workflow {run.workflowId}", category="fatal")
        return loaded, step

    def kind_of(self, run: RunState, step_id: str) -> str:
        """The step's kind; raises a fatal StepFailed when the step is not configured."""
        return self.lookup(run, step_id)[1].kind

    def agent_of(self, run: RunState, step_id: str) -> str | None:
        """The agent id (or provider) a step runs, or None for other kinds or a step no longer configured."""
        try:
            step = self.lookup(run, step_id)[1]
        except StepFailed:
            return None
        body = step.do or step
        return body.agent or body.provider

    def prompt_of(self, run: RunState, step_id: str) -> str:
        """The question an `input` step asks, with its placeholders filled."""
        loaded, step = self.lookup(run, step_id)
        assert step.input is not None
        return render(step.input.prompt, template_values(run, str(loaded.workspace)))

    def _in_process(self, loaded: LoadedConfig, step: StepConfig) -> bool:
        """True for an agent step whose provider is a built-in run in process (no workspace needed)."""
        body = step.do or step
        if step.wait_for is not None or step.for_each is not None or body.command is not None:
            return False
        agent = loaded.config.agents.get(body.agent or "") if body.provider is None else None
        provider = body.provider or (agent.provider if agent is not None else None)
        return provider is not None and self._runner.in_process(provider)

    def retry_policy(self, run: RunState) -> RetryPolicy:
        """The run's retry rules from orchestrator.yaml (no retries when it cannot be read)."""
        try:
            return self._configs(run.orchestratorId).config.retry_policy(run.workflowId)
        except SettingsError:
            return RetryPolicy()

    @tracing.traced("run.step", lambda _, run, step, *__: {"switchyard.run_id": run.runId, "switchyard.step": step})
    async def run(
        self, run: RunState, step_id: str, progress: Progress, extra_env: dict[str, str] | None = None
    ) -> StepOutcome:
        """Runs one agent, command, wait_for or for_each step; raises StepFailed when it does not complete."""
        loaded, step = self.lookup(run, step_id)
        folder = self._store.folder(run.runId) / "workspace"
        if not self._in_process(loaded, step):  # a process may use $SWITCHYARD_WORKSPACE; a built-in does not
            self._store.made(folder)
        env = {"SWITCHYARD_RUN_ID": run.runId, "SWITCHYARD_STEP_ID": step_id,
               "SWITCHYARD_WORKSPACE": str(folder), **(extra_env or {})}
        job = StepJob(run, step, loaded, env, progress)
        if step.wait_for is not None:
            return await wait_for(job)
        if step.for_each is not None:
            return await self._for_each.run(job)
        values = template_values(run, str(loaded.workspace))
        result = await self._bodies.run(job, step, step_id, values, env)
        usage = result.usage  # what the agent's CLI reported it spent, kept on the step
        fields = {} if usage is None else {"usage": {"usd": usage.usd, "tokensIn": usage.tokens_in,
                                                     "tokensOut": usage.tokens_out}}
        return StepOutcome(result.stdout, result.exit_code, result.duration_ms, result.stderr_tail, fields)


def handoff_env(run: RunState, step_id: str) -> dict[str, str]:
    """`SWITCHYARD_HANDOFF` for a step: the handoff file the step before it wrote, if it wrote one."""
    names = list(run.steps)
    index = names.index(step_id)
    previous = run.steps[names[index - 1]] if index > 0 else None
    path = (previous.model_extra or {}).get("handoffPath") if previous is not None else None
    return {"SWITCHYARD_HANDOFF": str(path)} if path else {}
