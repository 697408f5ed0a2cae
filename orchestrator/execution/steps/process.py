"""Runs a step body as a process: an agent (provider + prompt template) or a command (argv)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.api import Outbox, PermanentError
from gateway.channelkit.attachments import attachment_folder
from gateway.home import safe_name
from gateway.scope import ConversationScope
from orchestrator.agents.clis.runner import ProviderExhausted
from orchestrator.agents.progress import ProgressNotes
from orchestrator.agents.providers import ProviderRunner
from orchestrator.agents.request import TurnRequest
from orchestrator.agents.sandbox import Sandbox
from orchestrator.agents.spawn import ProviderFailed, ProviderResult
from orchestrator.agents.streaming import TextPreviews
from orchestrator.config.loading import read_template
from orchestrator.config.models import CONFIG_FILE, AgentConfig
from orchestrator.config.workflows import StepBody
from orchestrator.execution.steps.base import StepFailed, StepJob
from orchestrator.execution.steps.values import step_request
from orchestrator.execution.templates import render
from orchestrator.runs.base import RunStoreBase
from orchestrator.usage.meter import LimitReached
from orchestrator.usage.records import Payer
from orchestrator.workspaces import OwnWorkspaces, owner_of
from orchestrator.workspaces.retention import remove, stale

if TYPE_CHECKING:
    from orchestrator.agents.live import PermissionAsker, ToolApproval
    from orchestrator.chat.approvals import ApprovalBroker

COMMAND_TIMEOUT_SEC = 300.0
COMMAND_MAX_OUTPUT = 1_048_576
SWEEP_EVERY_SEC = 3600.0


class BodyRunner:
    """Runs agent and command bodies through the provider runner, turning failures into StepFailed."""

    def __init__(self, runner: ProviderRunner, store: RunStoreBase, outbox: Outbox | None = None,
                 approvals: ApprovalBroker | None = None, *, on_ask: Callable[[str], None] | None = None):
        """`on_ask`: called with the run's id when a step asks for approval (the executor lets its waiting
        messages go)."""
        self._runner = runner
        self._store = store
        self._outbox = outbox
        self._approvals = approvals
        self._on_ask = on_ask
        self._swept: dict[Path, float] = {}  # when each orchestrator's workspaces were last swept (retention)

    async def run(
        self, job: StepJob, body: StepBody, label: str, values: dict[str, Any], env: dict[str, str],
        request_extra: dict[str, Any] | None = None,
    ) -> ProviderResult:
        """Runs the body once; raises StepFailed (retryable, or fatal when the step says so), or TurnStopped
        when `/stop` stopped it."""
        conversation = ConversationScope.of(job.run.payload()).key  # also what `/stop` stops it by
        try:
            cwd, sandbox = await self._place(job, env)
            if body.command is not None:
                argv = [render(part, values) for part in body.command]
                return await self._runner.run_command(
                    label, argv, stdin=None, cwd=cwd, env=env,
                    timeout_sec=body.timeout_sec or COMMAND_TIMEOUT_SEC, max_output=COMMAND_MAX_OUTPUT,
                    turn=conversation, sandbox=sandbox,
                )
            agent = self._agent(job, body)
            prompt = render(read_template(agent.prompt, job.loaded.workspace), values)
            request = step_request(job.run, job.step.id, **(request_extra or {}))
            request_file = self._request_file(job, agent.provider, label)
            notes = self._notes(job)
            previews = self._previews(job, body.agent or agent.provider)
            turn = TurnRequest(prompt, cwd, request=request, request_file=request_file, env=env,
                               conversation=conversation, run=job.run.runId, on_note=notes, on_text=previews,
                               ask=self._asker(job), payer=Payer.of(job.run.payload()), sandbox=sandbox,
                               chat_tools=agent.chat_tools)
            try:
                try:
                    return await self._runner.run(agent.provider, turn)
                except (LimitReached, ProviderExhausted) as exc:
                    if agent.fallback is None or (isinstance(exc, LimitReached) and exc.standing.kind != "provider"):
                        raise
                    self._fell_back(job, agent.provider, agent.fallback, str(exc))
                return await self._runner.run(agent.fallback, turn)
            except LimitReached as exc:  # the run ends failed, saying which limit (its message is answered)
                raise StepFailed(str(exc), category="fatal") from exc
            finally:
                for closing in (notes, previews):
                    if closing is not None:
                        closing.close()
        except ProviderFailed as exc:
            raise StepFailed(str(exc), exc.result, category=job.failure_category()) from exc
        except PermanentError as exc:  # the run ends failed_final and its waiting message is dead-lettered
            raise StepFailed(str(exc), category="fatal", fields={"permanent": True}) from exc

    async def _place(self, job: StepJob, env: dict[str, str]) -> tuple[Path, Sandbox | None]:
        """Where the step's process works (its owner's workspace, made on first use, else the orchestrator's)
        and, with `sandbox: bwrap`, the sandbox it runs in: that workspace, its conversation's uploads and
        its run's own folder writable, the Switchyard home hidden, the owner's own CLI session history."""
        config, home, message = job.loaded.config, self._runner.home, job.run.payload()
        owner = owner_of(config.workspace_of(job.run.workflowId), message)
        spaces = OwnWorkspaces(home.root / "workspaces" / safe_name(job.loaded.orchestrator_id))
        cwd, name = job.loaded.workspace, "shared"
        if owner is not None:
            seed = config.workspaces
            template = job.loaded.workspace / seed.template if seed.template else None
            repository = job.loaded.workspace / seed.repository if seed.repository else None
            try:
                cwd = await asyncio.to_thread(spaces.ensure, owner, template=template, repository=repository)
            except OSError as exc:
                raise StepFailed(f"the workspace of {owner.key} could not be made: {exc}") from exc
            name = owner.name
            await self._sweep(spaces, seed.retention_days)
        if config.sandbox != "bwrap":
            return cwd, None
        uploads = attachment_folder(home, message.channelProfileId or message.channel,
                                    message.conversationId or message.senderId)
        writable = [uploads, *(Path(env[key]) for key in ("SWITCHYARD_WORKSPACE",) if key in env)]
        handoff = [env["SWITCHYARD_HANDOFF"]] if "SWITCHYARD_HANDOFF" in env else []  # the step before's file
        git_dir = spaces.git_dir(cwd)
        writable += [git_dir] if git_dir is not None else []
        protected = (job.loaded.workspace / CONFIG_FILE,) if owner is None else ()  # shared: it runs in its folder
        return cwd, Sandbox(cwd, network=config.network, hidden=(home.root,), writable=tuple(writable),
                            readable=tuple(Path(path) for path in [*config.sandbox_paths, *handoff]),
                            state=spaces.sessions(name),
                            protected=protected)

    async def _sweep(self, spaces: OwnWorkspaces, retention_days: float | None) -> None:
        """Removes the orchestrator's workspaces unused past `workspaces.retention_days`, at most once an hour."""
        now = time.monotonic()
        if retention_days is None or now - self._swept.get(spaces.root, -SWEEP_EVERY_SEC) < SWEEP_EVERY_SEC:
            return
        self._swept[spaces.root] = now
        for info in await asyncio.to_thread(stale, spaces, retention_days):
            await asyncio.to_thread(remove, spaces, info)

    def _fell_back(self, job: StepJob, provider: str, fallback: str, reason: str) -> None:
        """Notes on the run that the step's agent runs on its `fallback:` provider this time."""
        self._store.append_event(job.run.runId, "provider.fallback", step=job.step.id, provider=provider,
                                 fallback=fallback, reason=reason)

    def _request_file(self, job: StepJob, provider: str, label: str) -> Path | None:
        """Where the step's request JSON goes, for a provider whose entry asks for it (`request_file: true`);
        None for any other: it gets its prompt on stdin or as an argument."""
        configured = self._runner.settings_of(provider)
        if configured is None or not configured.request_file:
            return None
        return self._store.folder(job.run.runId) / f"{safe_name(label)}.request.json"

    def _asker(self, job: StepJob) -> PermissionAsker | None:
        """How the step's agent asks the run's conversation to approve a tool call (a live session's
        `session/request_permission`): waits up to the orchestrator's `approval_timeout_sec`."""
        if self._approvals is None:
            return None
        ask = self._approvals.asker(job.run.payload(), timeout_s=job.loaded.config.approval_timeout_sec)
        on_ask, run_id = self._on_ask, job.run.runId

        async def asking(approval: ToolApproval) -> str | None:
            if on_ask is not None:
                on_ask(run_id)
            return await ask(approval)

        return asking

    def _notes(self, job: StepJob) -> ProgressNotes | None:
        if self._outbox is None:
            return None
        config = job.loaded.config
        return ProgressNotes(self._outbox, job.run, job.step.id, after_sec=config.progress_after_sec,
                             interval_sec=config.progress_interval_sec)

    def _previews(self, job: StepJob, agent: str) -> TextPreviews | None:
        """The step's streamed answer as previews (orchestrator/agents/streaming.py), unless `stream: false`."""
        config = job.loaded.config
        if self._outbox is None or not config.stream:
            return None
        return TextPreviews(self._outbox, job.run, job.step.id, agent, after_sec=config.stream_after_sec,
                            interval_sec=config.stream_interval_sec)

    @staticmethod
    def _agent(job: StepJob, body: StepBody) -> AgentConfig:
        if body.provider is not None:
            return AgentConfig(provider=body.provider, prompt=body.prompt or "{{message}}")
        agent = job.loaded.config.agents.get(body.agent or "")
        if agent is None:
            raise StepFailed(f"unknown agent {body.agent!r}", category="fatal")
        return agent
