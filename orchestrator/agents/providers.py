"""Provider runs by name: a preset agent CLI, a generic argv as a subprocess, or a built-in in process."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

from gateway.aio import wait_event
from gateway.api import BuiltinProvider, PermanentError
from gateway.home import Home, atomic_write, safe_name
from gateway.models import IncomingPayload
from gateway.settings import ProviderSettings
from gateway.telemetry import tracing
from gateway.telemetry.events import EventLog
from orchestrator.agents.acp.route import AcpRoute
from orchestrator.agents.builtin import NO_TOOLS
from orchestrator.agents.clis import PRESETS
from orchestrator.agents.clis.runner import AgentCliRunner, ProviderRefused, cannot_start
from orchestrator.agents.live import Turns, TurnStopped
from orchestrator.agents.request import ProviderCall, TurnRequest
from orchestrator.agents.sandbox import Sandbox
from orchestrator.agents.sessions import SessionStore
from orchestrator.agents.spawn import ProviderFailed, ProviderResult, ms_since, run_process
from orchestrator.agents.turnspans import turn_attributes, turn_outcome
from orchestrator.chattools.names import TOKEN_ENV, URL_ENV
from orchestrator.chattools.server import ChatToolServer, ToolEndpoint
from orchestrator.config.models import CONFIG_FILE
from orchestrator.usage.meter import UsageMeter
from orchestrator.usage.records import PAYER_KINDS, TokenUsage

BUILTIN_MAX_OUTPUT = 1_048_576
STOP_WAIT_SEC = 5.0  # how long `/stop` waits for a stopped call to end (its processes are killed at once)


class ProviderRunner:
    """Runs providers by name: presets and settings.yaml commands as subprocesses, built-ins in process.

    Every subprocess gets the gateway's environment minus every variable a `*_env` setting names and
    minus `SWITCHYARD_*` internals, plus its own `env`: a chat user who asks an agent to print its
    environment sees no channel token.

    Every call made for a conversation is a turn in `turns` while it runs, so `/stop` stops it: its
    process group is killed and the call raises TurnStopped (never retried).
    """

    def __init__(
        self, home: Home, providers: Mapping[str, ProviderSettings], builtins: Mapping[str, BuiltinProvider],
        *, sessions: SessionStore, events: EventLog | None = None, hidden_env: frozenset[str] = frozenset(),
        meter: UsageMeter | None = None, chat_tools: ChatToolServer | None = None,
    ):
        """`sessions`: the backend's provider sessions; `meter`: counts and limits the turns of calls with a
        payer (None: nothing is counted); `chat_tools`: the MCP server whose tools each turn of a run gets
        (None: no turn gets them)."""
        self._chat_tools = chat_tools
        self._home = home
        self._providers = dict(providers)
        self._builtins = dict(builtins)
        self._hidden_env = hidden_env
        self.turns = Turns()  # the turns running now, by conversation: what /stop stops
        self.meter = meter
        self._sessions = sessions
        self.acp = AcpRoute(sessions, events)  # live sessions of `transport: acp` presets
        self._cli = AgentCliRunner(sessions, events)  # presets one-shot

    def reconfigure(self, providers: Mapping[str, ProviderSettings], hidden_env: frozenset[str]) -> None:
        """Runs the providers of settings.yaml reloaded while running; `hidden_env` joins the variables
        already hidden (a running channel still holds the token a removed `*_env` named)."""
        self._providers = dict(providers)
        self._hidden_env = self._hidden_env | hidden_env

    async def close(self) -> None:
        """Stops every live agent session's process (the handler's stop)."""
        await self.acp.close()

    def known(self) -> set[str]:
        """Every provider name that can run: settings.yaml ones and built-ins."""
        return set(self._providers) | set(self._builtins)

    def in_process(self, name: str) -> bool:
        """True for a built-in provider that settings.yaml does not override (it reads no request file)."""
        return name not in self._providers and name in self._builtins

    def settings_of(self, name: str) -> ProviderSettings | None:
        """The settings.yaml entry of a provider (None for a built-in)."""
        return self._providers.get(name)

    @tracing.traced("agent.turn", turn_attributes, turn_outcome)
    async def run(self, name: str, turn: TurnRequest) -> ProviderResult:
        """Writes the request file (when given), runs the provider; raises ProviderFailed (retryable) or
        PermanentError (unknown provider, or a failure retrying cannot fix). A call with a payer is a turn of
        that payer: its limits are checked first, counting the payer's turns running now, and it counts as
        running until it ends (LimitReached: nothing is started); what it spent is counted whether it succeeds
        or fails."""
        if name not in self._providers and name not in self._builtins:
            raise PermanentError(f"unknown provider {name!r}; known: {', '.join(sorted(self.known()))}")
        if turn.payer is None or self.meter is None:
            return await self._run(name, turn)
        meter, payer = self.meter, turn.payer
        kinds = tuple(kind for kind in PAYER_KINDS if kind not in turn.reserved)
        async with meter.turn(payer, name, kinds=kinds):  # counted as running until its spending is recorded
            started, ran = time.monotonic(), None
            try:
                ran = await self._run(name, turn)
                return ran
            except (ProviderFailed, ProviderRefused) as exc:
                ran = exc.result  # None: it never started (missing binary, unset key): nothing spent
                raise
            except TurnStopped:
                ran = ProviderResult("", "", None, ms_since(started), False, False)
                raise
            finally:
                if ran is not None:
                    seconds = time.monotonic() - started
                    usage = ran.usage or TokenUsage()
                    meter.record(payer, name, usage.spent(seconds), run_id=turn.run,  # at once: the step waits
                                 invalid=usage.invalid)

    async def _run(self, name: str, turn: TurnRequest) -> ProviderResult:
        """Chooses how the turn runs: a built-in in process, a generic argv, a preset in its live ACP session
        (`transport: acp`, unless its adapter is missing or cannot start), else the preset one-shot."""
        configured = self._providers.get(name)
        if configured is not None or turn.request_file is not None:  # a built-in needs no working directory
            _prepare(turn.cwd, turn.request_file, turn.request)
        async with self._granted(name, configured, turn) as tools:
            return await self._run_with(name, configured, replace(turn, tools=tools))

    def _granted(self, name: str, configured: ProviderSettings | None,
                 turn: TurnRequest) -> AbstractAsyncContextManager[ToolEndpoint | None]:
        """The chat tools of a workflow step's turn for as long as it runs (docs/chat-tools.md); none for the
        selector and diagnostics (no run), an agent with `chat_tools: false`, or the built-ins that never
        call them (`echo`, `rules`: their turns need not wait for a server still starting)."""
        message = turn.request.get("message")
        if (self._chat_tools is None or not turn.chat_tools or turn.conversation is None or turn.run is None
                or not isinstance(message, dict) or (configured is None and name in NO_TOOLS)):
            return nullcontext(None)
        step = turn.request.get("stepId")
        return self._chat_tools.granted(
            turn.conversation, turn.session_scope(configured) if configured is not None else None,
            run_id=turn.run, step_id=step if isinstance(step, str) else None,
            reply_to=IncomingPayload.model_validate(message), agent=name, prompt=turn.prompt)

    async def _run_with(self, name: str, configured: ProviderSettings | None, turn: TurnRequest) -> ProviderResult:
        if configured is None:
            return _checked(name, await self._run_builtin(self._builtins[name], turn))
        request_env = {"SWITCHYARD_REQUEST": str(turn.request_file)} if turn.request_file is not None else {}
        if turn.tools is not None:  # a generic argv or a script finds its chat tools here (docs/chat-tools.md)
            request_env.update({URL_ENV: turn.tools.url, TOKEN_ENV: turn.tools.token})
            if configured.type is not None and configured.transport != "acp":  # a live session: its mcpServers
                request_env.update(PRESETS[configured.type].tools_env(endpoint_folder(self._home, name)))
        full_env = self.provider_env(name, configured, {**request_env, **turn.env})
        sandbox = self.sandbox_of(configured, turn, full_env)
        async with self._turn(turn.turn_scope(), turn.tools) as stop:
            call = ProviderCall.of(name, configured, replace(turn, env=full_env, sandbox=sandbox), stop)
            if call.scope is not None and configured.type is not None:  # a preset continues a session: the
                # conversation's current one (`/new`, `/resume N`); a generic argv keeps none, so reads nothing
                call = replace(call, scope=await asyncio.to_thread(self._sessions.current, call.scope))
            if configured.type is None:
                return await _run_argv(call)
            if configured.transport == "acp":
                live = await self.acp.run(call)
                if live is not None:
                    return live
            return await self._cli.run(call)

    async def run_command(
        self, name: str, argv: Sequence[str], *, stdin: str | None, cwd: Path, timeout_sec: float,
        max_output: int, env: Mapping[str, str] | None = None, turn: str | None = None,
        sandbox: Sandbox | None = None,
    ) -> ProviderResult:
        """Runs a command step or function argv with the providers' environment (confined by `sandbox`, which
        reaches no network host: `model-only` is `none` for it); raises ProviderFailed, or TurnStopped when
        `/stop` of the conversation `turn` stopped it."""
        _prepare(cwd)
        environment = self.environment(env)
        if sandbox is not None:
            sandbox = sandbox.for_provider(None, environment)
        async with self._turn(turn) as stop:
            result = await run_process(
                argv, stdin=None if stdin is None else stdin.encode(), env=environment,
                cwd=cwd, timeout_sec=timeout_sec, max_output=max_output, stop=stop, sandbox=sandbox,
            )
            return _checked(name, _unless_stopped(name, stop, result), argv[0] if argv else name)

    @asynccontextmanager
    async def _turn(self, scope: str | None, tools: ToolEndpoint | None = None) -> AsyncIterator[asyncio.Event]:
        """Registers a process-running call in `turns` for as long as it runs; the event it yields is set by
        `/stop` (the process then is killed, its chat tools refused at once), whose wait ends when the call has."""
        stop, ended = asyncio.Event(), asyncio.Event()

        async def stop_turn() -> None:
            stop.set()
            self._revoke(tools)
            await wait_event(ended, STOP_WAIT_SEC)

        with self.turns.running(scope, stop_turn):
            try:
                yield stop
            finally:
                ended.set()

    @property
    def home(self) -> Home:
        """The Switchyard home the providers run for (a sandbox hides it)."""
        return self._home

    def sandbox_of(self, provider: ProviderSettings, turn: TurnRequest, env: Mapping[str, str]) -> Sandbox | None:
        """The sandbox a provider's process runs in: its scope's (`turn.sandbox`), else one of its working
        directory when the provider says `sandbox: bwrap`; None when neither asks (or it says `none`)."""
        if provider.sandbox == "none":
            return None
        base = turn.sandbox
        if base is None and provider.sandbox == "bwrap":
            base = Sandbox(turn.cwd, hidden=(self._home.root,), protected=(turn.cwd / CONFIG_FILE,))
        if base is None:
            return None
        if turn.request_file is not None:
            base = replace(base, readable=(*base.readable, turn.request_file))
        return base.for_provider(provider.type, env, base_url=provider.base_url, network=provider.network,
                                 readable=provider.sandbox_paths, also=[turn.tools.url] if turn.tools else [])

    def environment(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """A subprocess's environment: os.environ without secrets and SWITCHYARD_* internals, plus
        SWITCHYARD_HOME and the given variables."""
        inherited = {key: value for key, value in os.environ.items()
                     if key not in self._hidden_env and not key.startswith("SWITCHYARD_")}
        return {**inherited, "SWITCHYARD_HOME": str(self._home.root), **(extra or {})}

    def provider_env(self, name: str, provider: ProviderSettings,
                     extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The whole environment a provider's process gets (a preset's CLI or its ACP adapter): the
        gateway's without secrets, the provider's `env`, its endpoint variables, then `extra`."""
        return self.environment({**provider.env, **self._endpoint_env(name, provider), **(extra or {})})

    def _endpoint_env(self, name: str, provider: ProviderSettings) -> dict[str, str]:
        """What points a preset's CLI at its `base_url` with the key `api_key_env` names: the key goes only
        under the CLI's own variable (the named one is hidden like every `*_env`), config files only into
        `<home>/providers/<name>/` (0700)."""
        if provider.type is None or (provider.base_url is None and provider.api_key_env is None):
            return {}
        key = None
        if provider.api_key_env is not None:
            key = os.environ.get(provider.api_key_env, "").strip()
            if not key:
                raise ProviderRefused(name, f"the environment variable {provider.api_key_env} (api_key_env) is not "
                                            "set for the user running switchyard")
        folder = endpoint_folder(self._home, name)
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(folder, 0o700)
        return PRESETS[provider.type].endpoint_env(provider, key, folder)

    async def _run_builtin(self, provider: BuiltinProvider, turn: TurnRequest) -> ProviderResult:
        started = time.monotonic()
        try:
            request = turn.request if turn.tools is None else {
                **turn.request, "chatTools": {"url": turn.tools.url, "token": turn.tools.token}}
            answer = await self._stoppable(provider(turn.prompt, request), turn.turn_scope(), turn.tools)
        except TurnStopped:
            raise
        except Exception as exc:
            return ProviderResult("", f"{type(exc).__name__}: {exc}", 1, ms_since(started), False, False)
        truncated = len(answer) > BUILTIN_MAX_OUTPUT
        return ProviderResult(answer[:BUILTIN_MAX_OUTPUT], "", 0, ms_since(started), False, truncated)

    def _revoke(self, tools: ToolEndpoint | None) -> None:
        """A stopped turn sends nothing more: its token acts for nobody from now on."""
        if tools is not None and self._chat_tools is not None:
            self._chat_tools.revoke(tools)

    async def _stoppable(self, answer: Awaitable[str], scope: str | None, tools: ToolEndpoint | None = None) -> str:
        """Awaits a built-in's answer as a turn of `scope`: `/stop` cancels it (TurnStopped) and its chat tools."""
        if scope is None:
            return await answer
        task = asyncio.ensure_future(answer)
        stopped = False

        async def stop_turn() -> None:
            nonlocal stopped
            stopped = True
            self._revoke(tools)
            task.cancel()
            await asyncio.wait({task}, timeout=STOP_WAIT_SEC)

        with self.turns.running(scope, stop_turn):
            try:
                await asyncio.wait({task})
            except asyncio.CancelledError:
                task.cancel()
                raise
        if stopped and task.cancelled():
            raise TurnStopped("stopped by /stop")
        return task.result()


async def _run_argv(call: ProviderCall) -> ProviderResult:
    """Runs a generic provider's argv with the prompt as its last argument or on stdin (`input`)."""
    provider, prompt = call.provider, call.turn.prompt
    argv = prompt_argv(provider.argv, prompt) if provider.input == "arg" else provider.argv
    stdin = prompt.encode() if provider.input == "stdin" else None
    result = await run_process(argv, stdin=stdin, env=call.turn.env, cwd=call.turn.cwd,
                               timeout_sec=provider.timeout_sec, max_output=provider.max_output_bytes,
                               first_output_sec=provider.first_output_sec, stop=call.stop, sandbox=call.turn.sandbox)
    return _checked(call.name, _unless_stopped(call.name, call.stop, result), argv[0])


def _unless_stopped(name: str, stop: asyncio.Event, result: ProviderResult) -> ProviderResult:
    """The result of a process run, unless `/stop` stopped it (TurnStopped)."""
    if stop.is_set():
        raise TurnStopped(f"{name}: stopped after {result.duration_ms / 1000:.1f}s")
    return result


def prompt_argv(argv: Sequence[str], prompt: str) -> list[str]:
    """A generic provider's argv with the prompt as its last argument (`input: arg`). A prompt that
    starts with `-` gets `--` before it, so no option parser (argparse, click, getopt, cobra) reads a
    chat message such as `--config=/x` as a flag; any other prompt goes alone, as it always did."""
    return [*argv, "--", prompt] if prompt.startswith("-") else [*argv, prompt]


def endpoint_folder(home: Home, name: str) -> Path:
    """The private folder of one provider's CLI config (codex's CODEX_HOME, gemini's GEMINI_CLI_HOME)."""
    return home.root / "providers" / safe_name(name)


def _prepare(cwd: Path, request_file: Path | None = None, request: dict[str, Any] | None = None) -> None:
    """Creates the working directory and writes the request file a provider reads."""
    cwd.mkdir(parents=True, exist_ok=True)
    if request_file is not None:
        request_file.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps(request, ensure_ascii=False, indent=2, default=str).encode()
        atomic_write(request_file, data, fsync=False)


def _checked(name: str, result: ProviderResult, binary: str = "") -> ProviderResult:
    if result.timed_out or result.exit_code != 0:
        refusal = cannot_start(name, binary, result) if binary else None
        if refusal is not None:
            raise ProviderRefused(name, refusal, result.stderr_tail, result)
        raise ProviderFailed(name, result)
    return result
