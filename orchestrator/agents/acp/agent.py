"""One ACP adapter process: started in its own process group, its stderr drained into a bounded tail,
spoken to through the `acp` SDK's JSON-RPC connection and client router, stopped with its whole group.

Session updates are read from the wire in order (an observer of the connection) and handed to the turn
running in that session; updates outside a turn (a `session/load` replay) are ignored.

Every new and loaded session is put on the provider's model where the adapter would start it on another one
(claude-agent-acp starts each on its `default`), and a session the pool lets go is closed where the adapter
has `session/close` (codex, claude): tests/fakes/acp/FINDINGS.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from acp import AGENT_METHODS, PROTOCOL_VERSION, Client, text_block
from acp.client.router import build_client_router
from acp.connection import Connection, StreamEvent
from acp.schema import (
    CancelNotification,
    ClientCapabilities,
    Implementation,
    InitializeRequest,
    InitializeResponse,
    PromptRequest,
    PromptResponse,
    RequestPermissionResponse,
)
from acp.utils import notify_model, request_model

from orchestrator.agents.acp.turn import Turn, denied
from orchestrator.agents.sandbox import Sandbox

log = logging.getLogger(__name__)

STDERR_TAIL_BYTES = 8192
START_TIMEOUT_SEC = 60.0  # initialize: gemini takes 4-5 s on a loaded machine
CLOSE_TIMEOUT_SEC = 10.0
TERM_GRACE_SEC = 2.0
STDIO_LIMIT = 16 * 1024 * 1024


class AdapterError(Exception):
    """The adapter could not be started or did not answer as ACP says (`tail`: the end of its stderr)."""

    def __init__(self, message: str, tail: str = ""):
        super().__init__(f"{message}: {tail}" if tail else message)
        self.tail = tail


class AdapterUnavailable(AdapterError):
    """The adapter did not start or initialize, or refused the configured model: the provider falls back to its
    one-shot preset."""


class AgentProcess:
    """An adapter process and its connection; `turns` holds the turn running in each session.

    The connection is the SDK's own JSON-RPC `Connection` with its client router, not its `ClientSideConnection`:
    that class keeps its connection private and sends only the methods of its schema (`ext_method` prefixes
    `_`), while the adapters need `session/set_model` and answer session/new and session/load with `models`
    the schema drops. Typed requests go through `acp.utils.request_model`, as `ClientSideConnection` sends
    them; the one thing it adds, waiting for its `session_update` handlers after a prompt, is moot here (the
    updates are read by the connection's observer, in wire order, and the handler does nothing)."""

    def __init__(self, argv: list[str], env: Mapping[str, str], cwd: Path, *, settle_sec: float = 0.0,
                 sandbox: Sandbox | None = None):
        """`sandbox`: the adapter (and every CLI it starts) runs confined by bubblewrap for as long as it lives."""
        self.argv, self.env, self.cwd = argv, dict(env), cwd
        self.sandbox = sandbox
        self._confined = contextlib.AsyncExitStack()  # the sandbox's relay, while the process lives
        self.settle_sec = settle_sec  # how long after a turn the adapter may still be writing its session
        self.last_turn = float("-inf")
        self.process: asyncio.subprocess.Process | None = None
        self.conn: Connection | None = None
        self.turns: dict[str, Turn] = {}
        self._costs: dict[str, float] = {}  # each session's cost so far, as its last `usage_update` said
        self.can_load = False
        self.can_close = False  # `sessionCapabilities.close` advertised
        self.opened: set[str] = set()  # sessions created or loaded in this process (closed ones too: codex-acp
        # keeps much of a closed session's memory)
        self._stderr: deque[bytes] = deque()
        self._stderr_size = 0
        self._drain: asyncio.Task[None] | None = None
        self._loaded: dict[str, asyncio.Event] = {}  # sessions whose load replay is awaited

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def stderr_tail(self) -> str:
        return b"".join(self._stderr).decode(errors="replace").strip()[-2000:]

    async def start(self) -> None:
        """Starts the adapter and initializes the protocol; raises AdapterError."""
        argv = self.argv
        if self.sandbox is not None:
            argv = await self._confined.enter_async_context(self.sandbox.launched(self.argv))
        try:
            self.process = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=self.env, cwd=self.cwd, start_new_session=True,
                limit=STDIO_LIMIT)
        except OSError as exc:
            await self._confined.aclose()
            raise AdapterUnavailable(f"cannot start `{self.argv[0]}`: {exc.strerror or exc}") from exc
        assert self.process.stdin is not None and self.process.stdout is not None
        self._drain = asyncio.create_task(self._drain_stderr(), name="acp-stderr")
        self.conn = Connection(build_client_router(cast(Client, _Client(self))), self.process.stdin,
                               self.process.stdout, observers=[self._observe])
        hello = InitializeRequest(protocol_version=PROTOCOL_VERSION,
                                  client_capabilities=ClientCapabilities(terminal=False),
                                  client_info=Implementation(name="switchyard", version="1"))
        try:
            reply = await self._answer(request_model(self.conn, AGENT_METHODS["initialize"], hello, InitializeResponse),
                                       START_TIMEOUT_SEC)
        except BaseException as exc:  # cancelled too: the process is not left running
            await self.stop()
            if not isinstance(exc, Exception):
                raise
            raise AdapterUnavailable(f"`{self.argv[0]}` did not initialize ({_said(exc)})",
                                     self.stderr_tail()) from exc
        capabilities = reply.agent_capabilities
        self.can_load = bool(capabilities is not None and capabilities.load_session)
        sessions = capabilities.session_capabilities if capabilities is not None else None
        self.can_close = sessions is not None and sessions.close is not None

    async def new_session(self, cwd: Path, model: str | None = None,
                          mcp_servers: Sequence[Mapping[str, Any]] = ()) -> str:
        """A new session working in `cwd`, on `model` when one is configured, with `mcp_servers` (ACP
        `McpServer` objects: the chat tools); returns its id."""
        reply = await self._raw("session/new", {"cwd": str(cwd), "mcpServers": list(mcp_servers)}, START_TIMEOUT_SEC)
        if not isinstance(reply.get("sessionId"), str):
            raise AdapterError(f"`{self.argv[0]}` answered session/new without a sessionId", self.stderr_tail())
        session_id = str(reply["sessionId"])
        self.opened.add(session_id)
        await self._use_model(session_id, reply, model)
        return session_id

    async def load_session(self, session_id: str, cwd: Path, *, replay_after: bool, model: str | None = None,
                           mcp_servers: Sequence[Mapping[str, Any]] = ()) -> None:
        """Loads a session this adapter (or an earlier process) created, on `model` when one is configured;
        raises on failure. With `replay_after` (gemini) it waits for the history replay that follows the
        response."""
        replayed = self._loaded[session_id] = asyncio.Event()
        try:
            reply = await self._raw("session/load", {"sessionId": session_id, "cwd": str(cwd),
                                                     "mcpServers": list(mcp_servers)}, START_TIMEOUT_SEC)
            self.opened.add(session_id)
            if replay_after:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(replayed.wait(), 5.0)
        finally:
            self._loaded.pop(session_id, None)
        await self._use_model(session_id, reply, model)

    async def close_session(self, session_id: str) -> None:
        """Lets the adapter free a session the pool no longer keeps (`session/close`, where it has it)."""
        self._costs.pop(session_id, None)
        if not (self.can_close and self.alive):
            return
        try:
            await self._raw("session/close", {"sessionId": session_id}, CLOSE_TIMEOUT_SEC)
        except Exception as exc:
            log.info("`%s` did not close session %s: %s", self.argv[0], session_id, _said(exc))

    async def _use_model(self, session_id: str, offer: dict[str, Any], model: str | None) -> None:
        """Puts the session on `model` when the adapter's session/new or session/load answer shows another one
        (raises AdapterUnavailable when the adapter refuses it: the one-shot preset sends the model itself)."""
        change = model_change(offer, session_id, model)
        if change is None:
            return
        try:
            await self._raw(*change, START_TIMEOUT_SEC)
        except AdapterError:
            raise
        except Exception as exc:
            raise AdapterUnavailable(f"`{self.argv[0]}` would not use the model `{model}` ({_said(exc)})",
                                     self.stderr_tail()) from exc

    async def _raw(self, method: str, params: dict[str, Any], limit_sec: float | None = None) -> dict[str, Any]:
        """A request answered as the adapter sent it (the SDK's 0.12 schema drops `models` and has no
        `session/set_model`: see the class)."""
        assert self.conn is not None
        reply = await self._answer(self.conn.send_request(method, params), limit_sec)
        return reply if isinstance(reply, dict) else {}

    async def prompt(self, session_id: str, text: str, turn: Turn) -> str:
        """Runs one prompt; returns its stop reason. Raises AdapterError when the process dies first."""
        assert self.conn is not None
        self.turns[session_id] = turn
        try:
            request = PromptRequest(session_id=session_id, prompt=[text_block(text)])
            reply = await self._answer(request_model(self.conn, AGENT_METHODS["session_prompt"], request,
                                                     PromptResponse))
            turn.usage_total = _total_tokens(reply.usage)
            turn.usage = turn.spent(reply.usage, reply.field_meta, self._costs.get(session_id))
            if turn.cost is not None:
                self._costs[session_id] = turn.cost
            return str(reply.stop_reason)
        finally:
            self.turns.pop(session_id, None)
            self.last_turn = time.monotonic()

    async def cancel(self, session_id: str) -> None:
        """Asks the agent to end the session's turn (a notification: the prompt then ends `cancelled`)."""
        if self.conn is not None and self.alive:
            with contextlib.suppress(Exception):
                cancel = CancelNotification(session_id=session_id)
                await notify_model(self.conn, AGENT_METHODS["session_cancel"], cancel)

    async def stop(self) -> None:
        """Closes stdin, SIGTERMs the process group, waits, then SIGKILLs the group: none of it is left."""
        process = self.process
        if process is None:
            return
        unsettled = self.last_turn + self.settle_sec - time.monotonic()
        if unsettled > 0 and self.alive:  # claude killed right after a turn often loses the session (FINDINGS)
            await asyncio.sleep(unsettled)
        if process.stdin is not None:
            with contextlib.suppress(Exception):
                process.stdin.close()
        _signal_group(process.pid, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), TERM_GRACE_SEC)
        _signal_group(process.pid, signal.SIGKILL)  # children left in the group (codex's native binary)
        with contextlib.suppress(ProcessLookupError):
            await process.wait()
        await _group_gone(process.pid)
        if self.conn is not None:  # shielded: the SDK's close swallows a CancelledError it meets
            with contextlib.suppress(Exception):
                await asyncio.shield(self.conn.close())
        if self._drain is not None:
            self._drain.cancel()
            await asyncio.gather(self._drain, return_exceptions=True)
        await self._confined.aclose()
        for turn in list(self.turns.values()):
            turn.abandon()

    def kill(self) -> None:
        """SIGKILLs the whole group at once (a turn that did not end after /stop)."""
        if self.process is not None:
            _signal_group(self.process.pid, signal.SIGKILL)

    async def _answer(self, request: Any, limit_sec: float | None = None) -> Any:
        """Awaits a request, failing with AdapterError when the process exits before answering."""
        assert self.process is not None
        asked = asyncio.ensure_future(request)
        exited = asyncio.ensure_future(self.process.wait())
        try:
            done, _ = await asyncio.wait({asked, exited}, timeout=limit_sec, return_when=asyncio.FIRST_COMPLETED)
        finally:
            exited.cancel()
        if asked in done:
            error = asked.exception()
            if isinstance(error, (ConnectionError, EOFError, BrokenPipeError)):  # the process went away
                raise AdapterError(f"`{self.argv[0]}` closed the connection ({_said(error)})",
                                   self.stderr_tail()) from error
            return asked.result()
        asked.cancel()
        await asyncio.gather(asked, return_exceptions=True)
        if not done:
            raise AdapterError(f"`{self.argv[0]}` did not answer within {limit_sec:g} s", self.stderr_tail())
        raise AdapterError(f"`{self.argv[0]}` exited (code {self.process.returncode})", self.stderr_tail())

    def _observe(self, event: StreamEvent) -> None:
        """Every frame in wire order: a session update goes to the turn of its session, if one runs."""
        message = event.message
        if event.direction.value != "incoming" or message.get("method") != "session/update":
            return
        params = message.get("params") or {}
        session_id = str(params.get("sessionId"))
        update = params.get("update") or {}
        if update.get("sessionUpdate") == "available_commands_update" and session_id in self._loaded:
            self._loaded[session_id].set()
        turn = self.turns.get(session_id)
        if turn is not None:
            turn.update(update)

    async def _drain_stderr(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        while chunk := await self.process.stderr.read(4096):
            self._stderr.append(chunk)
            self._stderr_size += len(chunk)
            while self._stderr_size > STDERR_TAIL_BYTES and len(self._stderr) > 1:
                self._stderr_size -= len(self._stderr.popleft())


def model_change(offer: Mapping[str, Any], session_id: str, model: str | None) -> tuple[str, dict[str, Any]] | None:
    """The request that puts a session on `model`, from what the adapter's session/new or session/load answer
    offers: its `models` (claude-agent-acp, gemini: `session/set_model`, which takes any id), else a `model`
    config option (codex: `session/set_config_option`); None when it is on it already or offers neither."""
    if not model:
        return None
    models = offer.get("models")
    if isinstance(models, dict):
        if models.get("currentModelId") == model:
            return None
        return "session/set_model", {"sessionId": session_id, "modelId": model}
    options = offer.get("configOptions")
    for option in options if isinstance(options, list) else []:
        if isinstance(option, dict) and (option.get("category") == "model" or option.get("id") == "model"):
            if option.get("currentValue") == model:
                return None
            return "session/set_config_option", {"sessionId": session_id, "configId": option.get("id"),
                                                 "value": model}
    return None


class _Client:
    """The client side the agent calls: permissions go to the session's turn; updates are read by the
    observer (in wire order), so this handler does nothing."""

    def __init__(self, agent: AgentProcess):
        self._agent = agent

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any],
                                 **_: Any) -> RequestPermissionResponse:
        turn = self._agent.turns.get(session_id)
        if turn is None:
            return denied()
        return await turn.permission(tool_call, options)

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        """Read by AgentProcess._observe."""


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


async def _group_gone(pgid: int, limit_sec: float = 1.0) -> None:
    """Waits (briefly) until the SIGKILLed group's last member has exited."""
    deadline = time.monotonic() + limit_sec
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        await asyncio.sleep(0.01)


def _total_tokens(usage: Any) -> int | None:
    total = getattr(usage, "total_tokens", None) if usage is not None else None
    return int(total) if total is not None else None


def _said(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
