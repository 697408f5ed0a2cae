"""The Orchestrator: the handler the worker calls for each message (status fast path, commands, selector)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import replace

from gateway.api import BuiltinProvider, HandlerContext, PermanentError
from gateway.channelkit.edits import EDITED_PREFIX
from gateway.models import IncomingPayload, OutgoingPayload
from gateway.payloads import CONTROL_COMMANDS, STATUS_WORDS, command_word
from gateway.scope import ConversationScope
from gateway.settings import Settings, SettingsError, secret_env_names
from orchestrator.agents.builtin import builtin_providers
from orchestrator.agents.conversations import SESSION_COMMANDS, ConversationSessions
from orchestrator.agents.doctor import missing_providers
from orchestrator.agents.live import PermissionAsker, TurnStopped
from orchestrator.agents.providers import ProviderRunner
from orchestrator.agents.transcribe import Transcriber
from orchestrator.chat.access import Access
from orchestrator.chat.actions import Actions, reply
from orchestrator.chat.answers import ChatAnswers
from orchestrator.chat.approvals import ApprovalBroker
from orchestrator.chat.diagnostics import Diagnostics
from orchestrator.chat.functions import FunctionRegistry, cancel_text, unknown_run, workflow_listing
from orchestrator.chat.selector import Decision, Selector, SelectorError
from orchestrator.chattools.server import ChatToolServer
from orchestrator.chattools.tools import ChatTools
from orchestrator.config.cache import ConfigCache
from orchestrator.config.loading import LoadedConfig
from orchestrator.execution.executor import RunExecutor
from orchestrator.execution.results import SYSTEM_AGENT
from orchestrator.execution.steps import StepRunner
from orchestrator.execution.taskqueue import ensure_queue_dirs
from orchestrator.runs.state import RunState, belongs_to
from orchestrator.schedules.config import ScheduleConfig
from orchestrator.schedules.listing import REMINDERS_COMMAND, reminders_answer
from orchestrator.schedules.scheduler import Scheduler, scheduled_workflow
from orchestrator.storage.stores import OrchestratorStores
from orchestrator.usage.meter import LimitReached, UsageMeter
from orchestrator.usage.records import Payer

log = logging.getLogger("switchyard.orchestrator")

NOT_WAITING_NOTE = "\n(this run is not waiting for input)"
NOTHING_RUNNING = "Nothing is running."
STOPPED_TURN = "Stopped. The agent that was working on your message is stopped."
CONFIG_CHECK_SEC = 2.0  # how often each orchestrator.yaml is looked at for an edit
UNCLEAR_SELECTOR = "I could not understand the selector's answer ({reason}). Nothing was started."
BEFORE_SELECTOR = ("sender", "conversation", "profile")  # the limits checked before the selector


class Orchestrator:
    """Answers messages: run status at once, slash commands by rule, everything else via the selector."""

    def __init__(
        self, context: HandlerContext, stores: OrchestratorStores, *,
        providers: Mapping[str, BuiltinProvider] | None = None, max_parallel_runs: int = 4,
    ):
        """`stores`: opened from the backend the gateway composed (orchestrator/plugin.py)."""
        self._context = context
        self._watch: asyncio.Task[None] | None = None
        self._sweep: asyncio.Task[None] | None = None
        self._scheduling: asyncio.Task[None] | None = None
        builtins = {**builtin_providers(), **context.builtin_providers, **(providers or {})}
        self.access = Access(context.settings, context.events, stores.audit)
        self.meter = UsageMeter(stores.usage, context.settings.usage, context.events, roles_of=self.access.roles_of)
        self.approvals = ApprovalBroker(stores.approvals, context.outbox, context.events,
                                        on_asked=self.access.approval_asked,
                                        on_operator=self.access.operator_answered)
        self.chat_tools = ChatToolServer(ChatTools(
            context.home, context.settings.chat_tools, context.outbox, context.events,
            extra_roots=[context.home.resolve(root) for root in context.settings.files.extra_roots],
            questions=self.approvals.ask_question, on_ask=self._let_go, history=stores.history.recent,
            file_limits=context.file_limits, reminders=stores.reminders, on_reminder=self._reminder_set,
            schedules=stores.schedules,
            roles_of=lambda message: self.access.grant(message).roles))
        self._reminders = stores.reminders
        self._runner = ProviderRunner(context.home, context.settings.providers, builtins, events=context.events,
                                      hidden_env=secret_env_names(context.settings),
                                      sessions=stores.sessions, meter=self.meter,
                                      chat_tools=self.chat_tools if context.settings.chat_tools.enabled else None)
        self._transcriber = Transcriber(context.home, context.settings, self._runner, context.events)
        self._configs = ConfigCache(context.home, context.settings, self._runner.known(), events=context.events,
                                    on_reload=self._config_reloaded)
        self._store = stores.runs
        steps = StepRunner(self._runner, self._store, self._configs.get, context.outbox, self.approvals,
                           on_ask=self._let_go)
        queue = context.settings.queue
        self._executor = RunExecutor(home=context.home, store=self._store, steps=steps, events=context.events,
                                     outbox=context.outbox, max_parallel=max_parallel_runs,
                                     lock_ttl_sec=queue.lock_ttl_sec,
                                     runs_retention_days=queue.runs_retention_days,
                                     locks=stores.locks, dead_letter=context.dead_letter)
        self._selector = Selector(context.home, self._runner, context.events, stores.history)
        self._conversations = ConversationSessions(stores.sessions, stores.history)  # /new, /sessions, /resume
        self._answers = ChatAnswers(self.approvals, context.settings, stores.pairing, self.access)
        self._actions = Actions(
            store=self._store, executor=self._executor, runner=self._runner, queue_stats=context.queue_stats,
            diagnostics=Diagnostics(context.home, self._runner, context.queue_stats),
            plugin_functions=list(context.functions),
        )
        records = stores.schedules if context.enqueue is not None else None
        self.scheduler = None if records is None or context.enqueue is None else Scheduler(
            records=records, schedules=self._schedules, enqueue=context.enqueue, settings=context.settings,
            events=context.events, load_run=self._store.load, reminders=stores.reminders, outbox=context.outbox)

    def _let_go(self, run_id: str) -> None:
        """A step of the run asked its conversation to approve a tool call: a number answering it must not
        wait behind the run (the messages waiting on it are acknowledged)."""
        self._executor.delivery.let_go(run_id)

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
        try:  # before runs resume: their turns ask again
            await self.approvals.close_abandoned()
        except Exception as exc:  # the store unreachable: they expire by their time, answered by nobody
            log.warning("cannot close the approvals a stopped process left pending: %s", exc)
        if self._context.settings.chat_tools.enabled:
            self.chat_tools.start_soon()  # runs resumed below wait for it in their turns' grants
        await self._executor.start()
        self._watch = asyncio.create_task(self._watch_configs(), name="orchestrator-config-watch")
        self._sweep = asyncio.create_task(self.approvals.keep_sweeping(), name="orchestrator-approvals-sweep")
        if self.scheduler is not None:
            self._scheduling = asyncio.create_task(self.scheduler.run(), name="orchestrator-schedules")

    def reload_settings(self, settings: Settings) -> None:
        """Takes the settings.yaml sections reloaded while running (gateway/runtime/reload.py): the providers,
        the usage limits, `transcribe` and each profile's `allow_from` (who may answer approvals)."""
        self._context = replace(self._context, settings=settings)
        self._runner.reconfigure(settings.providers, secret_env_names(settings))
        self.meter.reconfigure(settings.usage)
        self.chat_tools.tools.reconfigure(settings.chat_tools)
        self._transcriber.reconfigure(settings)
        self._answers.reconfigure(settings)
        self.access.reconfigure(settings)
        self._configs.reconfigure(self._runner.known())

    def _config_reloaded(self) -> None:
        """An orchestrator.yaml was reloaded: its schedules may have changed."""
        if self.scheduler is not None:
            self.scheduler.wake()

    def _reminder_set(self) -> None:
        """A turn set a reminder: the scheduler's next pass reads it now (it may be due in seconds)."""
        if self.scheduler is not None:
            self.scheduler.wake()

    def _schedules(self) -> dict[str, ScheduleConfig]:
        """Every orchestrator's schedules, keyed `<orchestrator>/<schedule>` (an orchestrator.yaml that does
        not validate keeps its last valid version's; one never valid has none)."""
        found: dict[str, ScheduleConfig] = {}
        for orchestrator_id in self._context.settings.orchestrators:
            try:
                schedules = self._configs.get(orchestrator_id).config.schedules
            except SettingsError:
                continue
            found.update({f"{orchestrator_id}/{name}": schedule for name, schedule in schedules.items()})
        return found

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
        for task in (self._watch, self._sweep, self._scheduling):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self._executor.stop()
        await self._runner.close()  # live agent sessions: no adapter process outlives the handler
        await self.chat_tools.stop()
        await self._conversations.close()  # the counts kept in memory
        await asyncio.to_thread(self._selector.close)

    async def handle(self, message: IncomingPayload) -> list[OutgoingPayload]:
        """Answers one message with one reply (results of slow runs are pushed later), or none for a
        retried message whose run's result was already pushed. Its voice notes are transcribed first."""
        if message.job is not None:  # a channel-authored job: its profile's workflow, never a command
            loaded = self._load(message)
            workflow = scheduled_workflow(message) or self._profile_workflow(message, loaded)
            return [self._actions.start_job(message, message.job, loaded, workflow)]
        try:
            message = await self._transcriber.transcribed(message, turn=ConversationScope.of(message).key)
        except TurnStopped:  # `/stop` during the transcription: its reply says so; this message is done
            return []
        with self.access.handling(message, ConversationScope.of(message).key):
            return await self._answer(message)

    async def _answer(self, message: IncomingPayload) -> list[OutgoingPayload]:
        """`handle` of a message that is no job, once its voice notes are text."""
        answered = await self._answers.handle(message)  # a tapped approval button, or an option's number
        if answered is not None:
            return [answered]
        text = message.message.strip().lower()
        if message.workflowRunId and not self._reaches(message, message.workflowRunId):
            return [reply(message, unknown_run(message.workflowRunId), agent=SYSTEM_AGENT)]
        if message.workflowRunId and text in STATUS_WORDS:
            return [self._actions.run_snapshot(message, message.workflowRunId)]
        command = command_word(text)
        if command in ("/status", "/progress"):
            return [self._actions.workflow_status(message, agent=SYSTEM_AGENT)]
        if command in CONTROL_COMMANDS:
            return _replies(await self._stop(message))
        if command == "/help":
            return [reply(message, workflow_listing(self._load(message)), agent=SYSTEM_AGENT)]
        if command == "/usage":
            return [reply(message, await self._usage(message), agent=SYSTEM_AGENT)]
        if command == REMINDERS_COMMAND:  # this conversation's reminders only (orchestrator/schedules/listing.py)
            text = await asyncio.to_thread(reminders_answer, self._reminders, ConversationScope.of(message).key,
                                           message.message)
            return [reply(message, text, agent=SYSTEM_AGENT)]
        if command in SESSION_COMMANDS:  # ordered with the conversation's messages (gateway.payloads)
            scope = ConversationScope.of(message).key
            text = await asyncio.to_thread(self._conversations.answer, command, message.message, scope)
            return [reply(message, text, agent=SYSTEM_AGENT)]
        if message.editOf:  # an edit of a message already taken: the agent sees it is one
            message = message.model_copy(update={"message": f"{EDITED_PREFIX}{message.message}"})
        loaded = self._load(message)
        named = self.access.named_workflow(message, loaded)  # known by rule: refused before any selector runs
        refusal = self.access.workflow_refusal(message, loaded, named) if named is not None else None
        if refusal is not None:
            return [reply(message, refusal, agent=SYSTEM_AGENT)]
        run = self._actions.resolve_run(message)  # read once: the named run, else the conversation's
        if run is not None and self._actions.answers_input(message, run):
            return _replies(await self._actions.answer_input(message, run, loaded))
        if message.workflowRunId:
            return [self._actions.run_snapshot(message, message.workflowRunId, NOT_WAITING_NOTE)]
        if run is not None and self._actions.answered_input(message, run):
            return _replies(await self._actions.reattach_answer(message, loaded, run))
        return _replies(await self._select(message, loaded, run))

    def _reaches(self, message: IncomingPayload, run_id: str) -> bool:
        """Whether the run a message names may be reached from its conversation (orchestrator/chat/access.py)."""
        run = self._store.load(run_id)
        return run is None or self.access.reaches(message, run)

    async def _usage(self, message: IncomingPayload) -> str:
        """`/usage`: the sender's own; `/usage <sender id>`: another sender's, for a role allowed to."""
        words = message.message.split()
        other = words[1] if len(words) > 1 else None
        payer = Payer.of(message)
        if other is not None:
            refusal = self.access.usage_refusal(message, other)
            if refusal is not None:
                return refusal
            sender = f"{message.channel}/{message.profile}/{other}"
            payer = Payer(sender, sender, message.profile)
        return await asyncio.to_thread(self.meter.report, payer)

    def permission_asker(self, message: IncomingPayload) -> PermissionAsker:
        """The PermissionAsker of a turn answering `message`: asks its conversation, waits up to its
        orchestrator's `approval_timeout_sec`."""
        return self.approvals.asker(message, timeout_s=self._load(message).config.approval_timeout_sec)

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

    async def _stop(self, message: IncomingPayload) -> OutgoingPayload | None:
        """`/stop` and `/cancel` (which arrive beside the conversation's running message: gateway.payloads):
        stops the conversation's running turns, then cancels its run, and says what was stopped — the one
        answer about it: a run cancelled here for its own conversation sends no result of its own (`told`).
        None when the host executing the run cancelled it, whose result is then that answer."""
        scope = ConversationScope.of(message).key
        run = self._actions.current_run(message)  # read before the stop, which may end it
        others = self.access.others_in(message, scope, run)
        refusal = self.access.stop_refusal(message, others)
        if refusal is not None:
            return reply(message, refusal, agent=SYSTEM_AGENT)
        if others:
            self.access.record(message, "turn.stop_other", f"stopped what {', '.join(sorted(others))} started",
                               stopped=sorted(others), run=run.runId if run is not None else None)
        stopped = await self._runner.turns.stop(scope)
        if stopped:
            self._context.events.emit("turn.stopped", channel=message.channel, conversation=message.conversation,
                                      turns=stopped, job_id=run.runId if run is not None else None)
        if run is None:
            return reply(message, STOPPED_TURN if stopped else NOTHING_RUNNING, agent=SYSTEM_AGENT)
        text = await cancel_text(self._store, self._executor, run.runId, before=run, told=belongs_to(run, message))
        if text is None:
            return reply(message, STOPPED_TURN, agent=SYSTEM_AGENT) if stopped else None
        after = self._store.load(run.runId)
        if stopped or (after is not None and after.state == "cancelled"):
            text = f"Stopped. {text}"
        return reply(message, text, agent=SYSTEM_AGENT, run=after)

    async def _select(
        self, message: IncomingPayload, loaded: LoadedConfig, active: RunState | None
    ) -> OutgoingPayload | None:
        """Asks the selector (with the conversation's active run) and carries out its decision."""
        functions = self._actions.registry(loaded)
        try:
            decision = await self._decide(message, loaded, active, functions)
            refusal = self.access.decision_refusal(message, loaded, decision, self._store.load)
            if refusal is not None:
                return reply(message, refusal, agent=SYSTEM_AGENT)
            answer = await self._actions.execute(decision, message, loaded, functions)
        except SelectorError as exc:
            return reply(message, UNCLEAR_SELECTOR.format(reason=exc), agent=SYSTEM_AGENT)
        except LimitReached as exc:  # before the selector, or the selector's provider over its own limit
            return reply(message, str(exc), agent=SYSTEM_AGENT)
        except TurnStopped:  # the selector or diagnostics agent: `/stop`'s reply says so; this message is done
            return None
        if answer is not None:
            await self._conversations.count(ConversationScope.of(message).key, message.message)
            self._selector.remember(message, loaded, answer.message)
        return answer

    async def _decide(
        self, message: IncomingPayload, loaded: LoadedConfig, active: RunState | None, functions: FunctionRegistry
    ) -> Decision:
        """The selector's decision. A payer over a limit starts nothing (LimitReached): no selector, no run (a
        provider's own limit: at its turn). A selector that runs a CLI is a turn: the reservation that checks
        the sender's, conversation's and profile's limits is that turn's, until it ends; a built-in's decision
        is none, so it reserves nothing and the run's steps reserve their own turns."""
        payer = Payer.of(message)
        selector_turn = not self._runner.in_process(loaded.config.selector.provider)
        async with self.meter.turn(payer, kinds=BEFORE_SELECTOR, reserve=selector_turn):
            request = self._selector.build_request(message, loaded, functions.describe(),
                                                   active.summary() if active else None)
            return await self._selector.decide(request, loaded, turn=ConversationScope.of(message).key,
                                               payer=payer, reserved=BEFORE_SELECTOR if selector_turn else ())


def _replies(answer: OutgoingPayload | None) -> list[OutgoingPayload]:
    return [] if answer is None else [answer]
