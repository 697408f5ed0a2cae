"""One turn of a live ACP session, from the pool's session to the answer: the session a scope continues (its
live one, else the stored one loaded by `session/load`, else a new one whose first prompt carries the
transcript of the turns kept), the prompt (ended by `/stop`, cut at `timeout_sec`), and the turn kept in the
SessionStore (under `<provider>@acp`, with a bounded transcript) so a session that was evicted, crashed or
outlived a restart comes back. A stateless call gets a one-off session in the provider's warm process.

Which sessions and processes are live, and for how long, is the pool's (pool.py)."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from typing import Any

from gateway.storable import made_safe
from gateway.telemetry.events import EventLog
from orchestrator.agents.acp.agent import AdapterError, AgentProcess
from orchestrator.agents.acp.pool import AcpPool, Live
from orchestrator.agents.acp.specs import AdapterSpec, spec_of
from orchestrator.agents.acp.turn import Turn
from orchestrator.agents.live import PermissionAsker, ToolApproval, TurnStopped
from orchestrator.agents.request import ProviderCall
from orchestrator.agents.sessions import SessionStore
from orchestrator.agents.spawn import ProviderFailed, ProviderResult, ms_since
from orchestrator.chattools.names import SERVER_NAME, TOOL_NAMES

log = logging.getLogger(__name__)

STOP_GRACE_SEC = 3.0  # /stop: a turn not ended this long after session/cancel has its agent killed
SEED_CHARS = 8000  # the transcript a new session is seeded with, at most
TURN_CHARS = 2000


class LiveSessions:
    """Runs turns in the pool's live sessions and keeps each session's record in the SessionStore."""

    def __init__(self, pool: AcpPool, sessions: SessionStore, events: EventLog | None):
        self._pool, self._sessions, self._events = pool, sessions, events
        self._watchers: set[asyncio.Task[None]] = set()

    async def run(self, call: ProviderCall) -> ProviderResult:
        """Runs one turn in the scope's live session; raises ProviderFailed (retryable), AdapterError
        (the adapter cannot start: the caller falls back) or TurnStopped."""
        with self._pool.in_use(call.name, call.provider.idle_sec):
            return await self._run(call)

    async def _run(self, call: ProviderCall) -> ProviderResult:
        spec = spec_of(call.provider)
        started = time.monotonic()
        if call.scope is None:  # a stateless call (the selector's): a one-off session in the warm process
            assert spec.shared, "a one-off session needs an adapter that hosts many sessions"
            turn, live = await self._turn(replace(call, scope=f"call:{uuid.uuid4().hex}"), spec, stored=False)
            await self._pool.evict(live, keep_agent=True)
            return ProviderResult(made_safe(turn.answer(turn.stop_reason)), "", 0, ms_since(started), False, False,
                                  usage=turn.usage)
        async with self._sessions.hold(_key(call.name), call.scope):
            turn, live = await self._turn(call, spec)
            answer = made_safe(turn.answer(turn.stop_reason))
            self._save(call, live.session_id, answer)
        return ProviderResult(answer, "", 0, ms_since(started), False, False, usage=turn.usage)

    async def _turn(self, call: ProviderCall, spec: AdapterSpec, stored: bool = True) -> tuple[Turn, Live]:
        """Runs the prompt in the scope's session; once more in a fresh process when the agent turned out
        dead before the turn began (a crash since the last turn), or answered empty after a cancel (claude)."""
        for attempt in (1, 2):
            live, seed = await self._pool.acquire(call, spec, partial(self._open, call, spec, stored=stored))
            try:
                turn = await self._prompt(call, live, seed + call.turn.prompt)
            except _Lost:
                if attempt == 2:
                    raise
                continue
            finally:
                await self._pool.release(live)
            if attempt == 1 and spec.empty_after_cancel and turn.ended_empty(turn.stop_reason):
                live.reload = True
                continue
            return turn, live
        raise AssertionError("unreachable")

    async def _prompt(self, call: ProviderCall, live: Live, text: str) -> Turn:
        """One prompt, which `/stop` (the call's `stop` event) ends."""
        provider = call.provider
        ask = chat_tools_allowed(call.turn.ask) if call.turn.tools is not None else call.turn.ask
        turn = Turn(on_text=call.turn.on_text, ask=ask, permissions=provider.permissions)
        ended = asyncio.Event()

        async def stop() -> None:
            turn.stop()
            await live.agent.cancel(live.session_id)
            try:
                await asyncio.wait_for(ended.wait(), STOP_GRACE_SEC)
            except TimeoutError:
                live.agent.kill()

        try:
            with self._stoppable(call, stop):
                async with asyncio.timeout(provider.timeout_sec):
                    turn.stop_reason = await live.agent.prompt(live.session_id, text, turn)
        except TimeoutError:
            await self._pool.time_out(live)
            took = int(provider.timeout_sec * 1000)
            result = ProviderResult(turn.text, live.agent.stderr_tail(), None, took, True, False)
            raise ProviderFailed(call.name, result) from None
        except AdapterError as exc:
            await self._pool.discard(live)
            if turn.stopped:
                raise TurnStopped(f"{call.name}: stopped") from exc
            lost = _Lost if not (turn.chunks or turn.asked) else ProviderFailed
            raise lost(call.name, ProviderResult(turn.text, str(exc), None, 0, False, False)) from exc
        finally:
            ended.set()
        if turn.stopped:
            live.reload = spec_of(provider).empty_after_cancel
            raise TurnStopped(f"{call.name}: stopped")
        return turn

    @contextmanager
    def _stoppable(self, call: ProviderCall, stop: Callable[[], Awaitable[None]]) -> Iterator[None]:
        """Lets /stop reach the turn through the call's `stop` event (ProviderRunner registered the call in
        Turns: one registration per call)."""
        stopping = call.stop

        async def watch() -> None:
            await stopping.wait()
            await stop()

        watcher = asyncio.create_task(watch(), name=f"acp-stop:{call.name}")
        self._watchers.add(watcher)  # kept until done: a stop under way outlives the block
        watcher.add_done_callback(self._watchers.discard)
        try:
            yield
        finally:
            if not stopping.is_set():
                watcher.cancel()

    async def _open(self, call: ProviderCall, spec: AdapterSpec, agent: AgentProcess, *,
                    stored: bool) -> tuple[str, str]:
        """The scope's stored session loaded into `agent`, else a new one; returns its id and the seed."""
        assert call.scope is not None
        record = self._sessions.session(_key(call.name), call.scope, assigns_ids=False) if stored else None
        if record is not None and record.id and agent.can_load:
            loaded = await self._load(call, agent, record.id, spec)
            if loaded is not None:
                return loaded, ""
        seed = transcript(record.turns) if record is not None else ""
        return await agent.new_session(call.turn.cwd, call.provider.model, mcp_servers(call)), seed

    async def _load(self, call: ProviderCall, agent: AgentProcess, session_id: str,
                    spec: AdapterSpec) -> str | None:
        """Loads a stored session; None (and an event) when the adapter cannot."""
        try:
            await agent.load_session(session_id, call.turn.cwd, replay_after=spec.replay_after_load,
                                     model=call.provider.model, mcp_servers=mcp_servers(call))
        except AdapterError:
            raise
        except Exception as exc:
            if self._events is not None:
                self._events.emit("provider.session_reset", provider=call.name, scope=call.scope,
                                  session=session_id, reason=f"session/load failed: {exc}"[:300])
            return None
        return session_id

    def _save(self, call: ProviderCall, session_id: str, answer: str) -> None:
        assert call.scope is not None
        prompt = call.turn.prompt
        try:
            self._sessions.save(_key(call.name), call.scope, session_id,
                                {"prompt": prompt[-TURN_CHARS:], "answer": answer[-TURN_CHARS:]})
        except Exception as exc:  # the turn has run: a lost record only costs the memory on a reload
            log.warning("%s: could not keep the session of %s: %s", call.name, call.scope, exc)


class _Lost(ProviderFailed):
    """The agent was gone before the turn did anything: the turn runs again in a fresh process."""


def mcp_servers(call: ProviderCall) -> list[dict[str, Any]]:
    """The ACP `mcpServers` of a session opened for `call`: its chat tools (docs/chat-tools.md), whose token
    names the session's scope, so later turns in the same session reach them too; none without."""
    tools = call.turn.tools
    if tools is None:
        return []
    headers = [{"name": name, "value": value} for name, value in tools.headers.items()]
    return [{"type": "http", "name": SERVER_NAME, "url": tools.url, "headers": headers}]


def chat_tools_allowed(ask: PermissionAsker | None) -> PermissionAsker:
    """An asker that allows the calls of the chat tools at once (they are the gateway's own, confined to the
    conversation and bounded per turn) and asks `ask` about every other tool (None: denied, as before).

    Each adapter asks its own way (tests/fakes/clis/MCP.md): claude-agent-acp titles the call
    `mcp__switchyard__send_message`, gemini `send_message (switchyard MCP Server)`, codex-acp "Approve MCP tool
    call" with `"server_name": "switchyard"` in its request."""

    async def asking(approval: ToolApproval) -> str | None:
        if _is_chat_tool(approval):
            return next((o.id for o in approval.options if o.kind == "allow_once"),
                        next((o.id for o in approval.options if o.kind.startswith("allow")), None))
        return await ask(approval) if ask is not None else None

    return asking


def _is_chat_tool(approval: ToolApproval) -> bool:
    title = approval.title
    return (any(title == f"mcp__{SERVER_NAME}__{tool}" or title == f"{tool} ({SERVER_NAME} MCP Server)"
                for tool in TOOL_NAMES)
            or (title == "Approve MCP tool call" and f'"server_name": "{SERVER_NAME}"' in approval.detail
                and '"codex_approval_kind": "mcp_tool_call"' in approval.detail))


def transcript(turns: list[dict[str, str]]) -> str:
    """The conversation so far, for a new session that replaces a lost one (newest turns kept)."""
    lines: list[str] = []
    size = 0
    for turn in reversed(turns):
        pair = f"User: {turn.get('prompt', '')}\nAssistant: {turn.get('answer', '')}\n"
        size += len(pair)
        if size > SEED_CHARS:
            break
        lines.append(pair)
    if not lines:
        return ""
    return ("(This conversation continues in a new session. It so far:)\n" + "".join(reversed(lines))
            + "(End of the conversation so far. The new message:)\n")


def _key(name: str) -> str:
    return f"{name}@acp"
