"""The Orchestrator: the handler the worker calls for each message (status fast path, commands, selector)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from gateway.api import BuiltinProvider, HandlerContext, PermanentError
from gateway.models import IncomingPayload, OutgoingPayload
from gateway.settings import SettingsError, secret_env_names
from orchestrator.actions import NO_ACTIVE_RUN, Actions, reply
from orchestrator.config import ConfigCache, LoadedConfig
from orchestrator.diagnostics import Diagnostics
from orchestrator.doctor import missing_providers
from orchestrator.executor import RunExecutor
from orchestrator.functions import cancel_text, workflow_listing
from orchestrator.providers import ProviderRunner
from orchestrator.results import SYSTEM_AGENT
from orchestrator.rules import STATUS_WORDS, builtin_providers
from orchestrator.runstate import RunState
from orchestrator.selector import Selector, SelectorError
from orchestrator.steps import StepRunner
from orchestrator.stores import backend_for, open_history, open_run_store, open_sessions
from orchestrator.taskqueue import ensure_queue_dirs

log = logging.getLogger("switchyard.orchestrator")

NOT_WAITING_NOTE = "\n(this run is not waiting for input)"
CONFIG_CHECK_SEC = 2.0  # how often each orchestrator.yaml is looked at for an edit
UNCLEAR_SELECTOR = "I could not understand the selector's answer ({reason}). Nothing was started."


class Orchestrator:
    """Answers messages: run status at once, slash commands by rule, everything else via the selector."""

    def __init__(
        self, context: HandlerContext, *, providers: Mapping[str, BuiltinProvider] | None = None,
        max_parallel_runs: int = 4,
    ):
        self._context = context
        self._watch: asyncio.Task[None] | None = None
        builtins = {**builtin_providers(), **context.builtin_providers, **(providers or {})}
        backend = context.backend if context.backend is not None else backend_for(context.home, context.settings)
        self._opened = backend if context.backend is None else None  # a backend of its own: closed by `stop`
        self._runner = ProviderRunner(context.home, context.settings.providers, builtins, events=context.events,
                                      hidden_env=secret_env_names(context.settings),
                                      sessions=open_sessions(backend))
        self._configs = ConfigCache(context.home, context.settings, self._runner.known(), events=context.events)
        self._store = open_run_store(backend)
        steps = StepRunner(self._runner, self._store, self._configs.get, context.outbox)
        queue = context.settings.queue
        self._executor = RunExecutor(home=context.home, store=self._store, steps=steps, events=context.events,
                                     outbox=context.outbox, max_parallel=max_parallel_runs,
                                     lock_ttl_sec=queue.lock_ttl_sec,
                                     runs_retention_days=queue.runs_retention_days,
                                     locks=backend.locks(ttl_s=queue.lock_ttl_sec))
        self._executor.delivery.dead_letter = context.dead_letter  # a refused run's answered message
        self._selector = Selector(context.home, self._runner, context.events,
                                  open_history(backend))
        self._actions = Actions(
            store=self._store, executor=self._executor, runner=self._runner, queue_stats=context.queue_stats,
            diagnostics=Diagnostics(context.home, self._runner, context.queue_stats),
            plugin_functions=list(context.functions),
        )

    async def start(self) -> None:
        """Creates the agent task queues, resumes runs a previous process left unfinished, drains the queue."""
        for orchestrator_id in self._context.settings.orchestrators:
            try:
                ensure_queue_dirs(self._configs.get(orchestrator_id))
            except (SettingsError, OSError) as exc:
                self._context.events.emit("orchestrator.invalid", orchestrator=orchestrator_id, reason=str(exc))
        for problem in missing_providers(self._context.home, self._context.settings):
            log.warning("%s: messages that need it will fail", problem)
            self._context.events.emit("provider.missing", reason=problem)
        await self._executor.start()
        self._watch = asyncio.create_task(self._watch_configs(), name="orchestrator-config-watch")

    async def _watch_configs(self) -> None:
        """Reads each orchestrator.yaml again soon after an edit, so a broken one is reported before a
        message needs it."""
        while True:
            await asyncio.sleep(CONFIG_CHECK_SEC)
            try:
                self._configs.refresh()
            except OSError as exc:
                log.warning("cannot look at an orchestrator.yaml: %s", exc)

    async def stop(self) -> None:
        """Stops run tasks (their state stays on disk and resumes at the next start); finishes the
        selector files still being written."""
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
        await self._executor.stop()
        await self._runner.close()  # live agent sessions: no adapter process outlives the handler
        await asyncio.to_thread(self._selector.close)
        if self._opened is not None:
            await asyncio.to_thread(self._opened.close)

    async def handle(self, message: IncomingPayload) -> list[OutgoingPayload]:
        """Answers one message with one reply (results of slow runs are pushed later), or none for a
        retried message whose run's result was already pushed."""
        if message.job is not None:  # a channel-authored job: its profile's workflow, never a command
            loaded = self._load(message)
            return [self._actions.start_job(message, message.job, loaded, self._profile_workflow(message, loaded))]
        text = message.message.strip().lower()
        if message.workflowRunId and text in STATUS_WORDS:
            return [self._actions.run_snapshot(message, message.workflowRunId)]
        command = text.split(maxsplit=1)[0] if text.startswith("/") else ""
        if command in ("/status", "/progress"):
            return [self._actions.workflow_status(message, agent=SYSTEM_AGENT)]
        if command == "/cancel":
            return [await self._cancel(message)]
        if command == "/help":
            return [reply(message, workflow_listing(self._load(message)), agent=SYSTEM_AGENT)]
        loaded = self._load(message)
        run = self._actions.resolve_run(message)  # read once: the named run, else the conversation's
        if run is not None and self._actions.answers_input(message, run):
            return _replies(await self._actions.answer_input(message, run, loaded))
        if message.workflowRunId:
            return [self._actions.run_snapshot(message, message.workflowRunId, NOT_WAITING_NOTE)]
        if run is not None and self._actions.answered_input(message, run):
            return _replies(await self._actions.reattach_answer(message, loaded, run))
        return _replies(await self._select(message, loaded, run))

    def _profile_workflow(self, message: IncomingPayload, loaded: LoadedConfig) -> str | None:
        """The workflow a channel profile names (`workflow:`), else the rules' default workflow."""
        profile = self._context.settings.profile(message.profile)
        named = profile.option("workflow") if profile is not None else None
        return str(named) if named else loaded.config.rules.default_workflow

    def _load(self, message: IncomingPayload) -> LoadedConfig:
        orchestrator_id = self._context.settings.orchestrator_for(message.channelProfileId)
        try:
            return self._configs.get(orchestrator_id)
        except SettingsError as exc:
            self._context.events.emit("orchestrator.invalid", orchestrator=orchestrator_id, reason=str(exc))
            raise PermanentError(f"orchestrator {orchestrator_id!r} is misconfigured: {exc}") from exc

    async def _cancel(self, message: IncomingPayload) -> OutgoingPayload:
        run = self._actions.resolve_run(message)
        if run is None:
            return reply(message, NO_ACTIVE_RUN, agent=SYSTEM_AGENT)
        text = await cancel_text(self._store, self._executor, run.runId)
        return reply(message, text, agent=SYSTEM_AGENT, run=self._store.load(run.runId))

    async def _select(
        self, message: IncomingPayload, loaded: LoadedConfig, active: RunState | None
    ) -> OutgoingPayload | None:
        """Asks the selector (with the conversation's active run) and carries out its decision."""
        functions = self._actions.registry(loaded)
        request = self._selector.build_request(message, loaded, functions.describe(),
                                               active.summary() if active else None)
        try:
            decision = await self._selector.decide(request, loaded)
        except SelectorError as exc:
            return reply(message, UNCLEAR_SELECTOR.format(reason=exc), agent=SYSTEM_AGENT)
        answer = await self._actions.execute(decision, message, loaded, functions)
        if answer is not None:
            self._selector.remember(message, loaded, answer.message)
        return answer


def _replies(answer: OutgoingPayload | None) -> list[OutgoingPayload]:
    return [] if answer is None else [answer]
