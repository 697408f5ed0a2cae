"""Step kinds: an `agent` step (a provider run with a prompt template) and a `command` step (argv)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.api import PermanentError
from gateway.home import safe_name
from gateway.settings import SettingsError
from orchestrator.config import LoadedConfig, StepConfig, read_template
from orchestrator.providers import ProviderFailed, ProviderResult, ProviderRunner
from orchestrator.runs import RunState, RunStore
from orchestrator.templates import render

COMMAND_TIMEOUT_SEC = 300.0
COMMAND_MAX_OUTPUT = 1_048_576


class StepFailed(Exception):
    """A step could not complete; the message says why, `result` holds the process outcome if one ran."""

    def __init__(self, message: str, result: ProviderResult | None = None):
        super().__init__(message)
        self.result = result


@dataclass(frozen=True)
class StepOutcome:
    """What a completed step produced."""

    output: str
    exit_code: int | None
    duration_ms: int
    stderr_tail: str


def template_values(run: RunState) -> dict[str, Any]:
    """The placeholders a step's prompt or argv may use."""
    return {
        "message": str(run.message.get("message", "")),
        "sender": str(run.message.get("sender", "")),
        "input": run.input,
        "steps": {name: {"output": (s.output or "").rstrip(), "status": s.status}
                  for name, s in run.steps.items()},
        "run": {"id": run.runId, "workflow": run.workflowId},
    }


def step_request(run: RunState, step_id: str) -> dict[str, Any]:
    """The request file of a workflow step (DESIGN "request file")."""
    return {
        "runId": run.runId, "workflowId": run.workflowId, "stepId": step_id, "input": run.input,
        "message": run.message,
        "steps": {name: {"status": s.status, "output": s.output}
                  for name, s in run.steps.items() if name != step_id},
    }


class StepRunner:
    """Runs one step of a run through the provider runner."""

    def __init__(self, runner: ProviderRunner, store: RunStore, configs: Callable[[str], LoadedConfig]):
        self._runner = runner
        self._store = store
        self._configs = configs

    def agent_of(self, run: RunState, step_id: str) -> str | None:
        """The agent id a step runs, or None for command steps (or a step no longer configured)."""
        try:
            step = self._step(run, step_id)[1]
        except StepFailed:
            return None
        return step.agent

    async def run(self, run: RunState, step_id: str) -> StepOutcome:
        """Runs the step; raises StepFailed with a clear reason when it does not complete."""
        loaded, step = self._step(run, step_id)
        env = self._environment(run, step_id)
        try:
            if step.agent is not None:
                result = await self._run_agent(loaded, step.agent, run, step_id, env)
            else:
                result = await self._run_command(loaded, step, run, env)
        except ProviderFailed as exc:
            raise StepFailed(str(exc), exc.result) from exc
        except PermanentError as exc:
            raise StepFailed(str(exc)) from exc
        return StepOutcome(result.stdout, result.exit_code, result.duration_ms, result.stderr_tail)

    def _step(self, run: RunState, step_id: str) -> tuple[LoadedConfig, StepConfig]:
        try:
            loaded = self._configs(run.orchestratorId)
        except SettingsError as exc:
            raise StepFailed(f"orchestrator configuration: {exc}") from exc
        workflow = loaded.config.workflows.get(run.workflowId)
        step = workflow.step(step_id) if workflow is not None else None
        if step is None:
            raise StepFailed(f"step {step_id} is no longer in workflow {run.workflowId}")
        return loaded, step

    def _environment(self, run: RunState, step_id: str) -> dict[str, str]:
        workspace = _ensure_dir(self._store.folder(run.runId) / "workspace")
        return {"SWITCHYARD_RUN_ID": run.runId, "SWITCHYARD_STEP_ID": step_id,
                "SWITCHYARD_WORKSPACE": str(workspace)}

    async def _run_agent(
        self, loaded: LoadedConfig, agent_id: str, run: RunState, step_id: str, env: dict[str, str]
    ) -> ProviderResult:
        agent = loaded.config.agents[agent_id]
        prompt = render(read_template(agent.prompt, loaded.workspace), template_values(run))
        request_file = self._store.folder(run.runId) / f"{safe_name(step_id)}.request.json"
        return await self._runner.run(agent.provider, prompt, request=step_request(run, step_id),
                                      request_file=request_file, cwd=loaded.workspace, env=env)

    async def _run_command(
        self, loaded: LoadedConfig, step: StepConfig, run: RunState, env: dict[str, str]
    ) -> ProviderResult:
        values = template_values(run)
        argv = [render(part, values) for part in step.command or []]
        return await self._runner.run_command(
            step.id, argv, stdin=None, cwd=loaded.workspace, env=env,
            timeout_sec=step.timeout_sec or COMMAND_TIMEOUT_SEC, max_output=COMMAND_MAX_OUTPUT,
        )


def _ensure_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
