"""The live ACP sessions of this process: one per (provider, conversation scope), at most `max_live` per
provider, closed after `idle_sec` unused and least-recently-used first when a new one needs room.

codex and gemini host every session of a provider in one process; claude gets one process per session.
A session the pool lets go is closed in a shared process where the adapter can (codex; gemini cannot),
and the process is retired once it has hosted `max_live` such sessions (more than its live ones, as a new
session needs room; codex-acp keeps much of a closed session's memory): new sessions go to a fresh
process, and the old one is stopped as soon as no turn runs in it (its idle sessions load again when
next used). So an adapter's memory follows `max_live`, not the number of conversations.
Session ids are kept in the SessionStore (under `<provider>@acp`), with a bounded transcript of the turns:
a session that was evicted, crashed or outlived a restart comes back by `session/load`, and where that
fails (gemini in its creation minute, claude killed right after a turn) as a new session whose first
prompt carries the transcript.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from gateway.settings import ProviderSettings
from gateway.storable import made_safe
from gateway.telemetry.events import EventLog
from orchestrator.agents.acp.agent import AdapterError, AgentProcess
from orchestrator.agents.acp.specs import AdapterSpec, adapter_argv, adapter_env, spec_of
from orchestrator.agents.acp.turn import Turn
from orchestrator.agents.live import PermissionAsker, TextSink, Turns, TurnStopped
from orchestrator.agents.sessions import SessionStore
from orchestrator.agents.spawn import ProviderFailed, ProviderResult, ms_since

log = logging.getLogger(__name__)

STOP_GRACE_SEC = 3.0  # /stop: a turn not ended this long after session/cancel has its agent killed
SEED_CHARS = 8000  # the transcript a new session is seeded with, at most
TURN_CHARS = 2000


@dataclass
class Live:
    """One live session: whose it is, the agent hosting it, when it was last used."""

    name: str
    scope: str
    session_id: str
    agent: AgentProcess
    last_used: float = field(default_factory=time.monotonic)
    busy: bool = False
    reload: bool = False  # claude after a cancel: load it again in a fresh process before the next prompt


@dataclass(frozen=True)
class TurnRequest:
    """What one turn of a live session needs besides the prompt."""

    name: str
    provider: ProviderSettings
    cwd: Path
    env: Mapping[str, str]
    scope: str | None  # the session's scope (a conversation's, or a run's); None: a one-off session
    conversation: str | None = None  # the scope /stop knows the turn by
    on_text: TextSink | None = None
    ask: PermissionAsker | None = None
    stopping: asyncio.Event | None = None  # set by /stop when the caller registered the turn itself


class AcpPool:
    """Live sessions by (provider, scope); `close` stops every agent process."""

    def __init__(self, sessions: SessionStore, events: EventLog | None, turns: Turns):
        self._sessions, self._events, self._turns = sessions, events, turns
        self._live: dict[tuple[str, str], Live] = {}
        self._watchers: set[asyncio.Task[None]] = set()
        self._shared: dict[str, AgentProcess] = {}  # provider name -> its one process (codex, gemini)
        self._retired: set[AgentProcess] = set()  # shared processes stopped once no turn runs in them
        self._locks: dict[str, asyncio.Lock] = {}
        self._freed = asyncio.Condition()
        self._reaper: asyncio.Task[None] | None = None
        self._idle_of: dict[str, float] = {}  # provider name -> its idle_sec
        self._used: dict[str, float] = {}  # provider name -> when a turn of it last ended
        self._active: dict[str, int] = {}  # provider name -> its turns running now (its process is kept)
        self._closed = False

    def live_count(self, name: str) -> int:
        return sum(1 for live in self._live.values() if live.name == name)

    def agents(self) -> list[AgentProcess]:
        """Every adapter process running now (each shared one once)."""
        found = {id(live.agent): live.agent for live in self._live.values()}
        found |= {id(agent): agent for agent in [*self._shared.values(), *self._retired]}
        return list(found.values())

    async def run(self, request: TurnRequest, prompt: str) -> ProviderResult:
        """Runs one turn in the scope's live session; raises ProviderFailed (retryable), AdapterError
        (the adapter cannot start: the caller falls back) or TurnStopped."""
        if self._closed:
            raise RuntimeError("the ACP pool is closed")
        self._start_reaper(request.name, request.provider.idle_sec)
        self._active[request.name] = self._active.get(request.name, 0) + 1
        try:
            return await self._run(request, prompt)
        finally:
            self._active[request.name] -= 1

    async def _run(self, request: TurnRequest, prompt: str) -> ProviderResult:
        spec = spec_of(request.provider)
        started = time.monotonic()
        if request.scope is None:  # a stateless call (the selector's): a one-off session in the warm process
            assert spec.shared, "a one-off session needs an adapter that hosts many sessions"
            request = replace(request, scope=f"call:{uuid.uuid4().hex}")
            turn, live = await self._turn(request, spec, prompt, stored=False)
            await self._evict(live, keep_agent=True)
            return ProviderResult(made_safe(turn.answer(turn.stop_reason)), "", 0, ms_since(started), False, False,
                                  usage=turn.usage)
        async with self._sessions.hold(_key(request.name), request.scope):
            turn, live = await self._turn(request, spec, prompt)
            answer = made_safe(turn.answer(turn.stop_reason))
            self._save(request, live.session_id, prompt, answer)
        return ProviderResult(answer, "", 0, ms_since(started), False, False, usage=turn.usage)

    async def _turn(self, request: TurnRequest, spec: AdapterSpec, prompt: str,
                    stored: bool = True) -> tuple[Turn, Live]:
        """Runs the prompt in the scope's session; once more in a fresh process when the agent turned out
        dead before the turn began (a crash since the last turn), or answered empty after a cancel (claude)."""
        for attempt in (1, 2):
            live, seed = await self._acquire(request, spec, stored)
            try:
                turn = await self._prompt(request, live, seed + prompt)
            except _Lost:
                if attempt == 2:
                    raise
                continue
            finally:
                await self._release(live)
            if attempt == 1 and spec.empty_after_cancel and turn.ended_empty(turn.stop_reason):
                live.reload = True
                continue
            return turn, live
        raise AssertionError("unreachable")

    async def _prompt(self, request: TurnRequest, live: Live, text: str) -> Turn:
        """One prompt; registered in Turns so /stop can end it."""
        turn = Turn(on_text=request.on_text, ask=request.ask, permissions=request.provider.permissions)
        ended = asyncio.Event()

        async def stop() -> None:
            turn.stop()
            await live.agent.cancel(live.session_id)
            try:
                await asyncio.wait_for(ended.wait(), STOP_GRACE_SEC)
            except TimeoutError:
                live.agent.kill()

        try:
            with self._stoppable(request, stop):
                async with asyncio.timeout(request.provider.timeout_sec):
                    turn.stop_reason = await live.agent.prompt(live.session_id, text, turn)
        except TimeoutError:
            await self._time_out(live)
            took = int(request.provider.timeout_sec * 1000)
            result = ProviderResult(turn.text, live.agent.stderr_tail(), None, took, True, False)
            raise ProviderFailed(request.name, result) from None
        except AdapterError as exc:
            await self._discard(live)
            if turn.stopped:
                raise TurnStopped(f"{request.name}: stopped") from exc
            lost = _Lost if not (turn.chunks or turn.asked) else ProviderFailed
            raise lost(request.name, ProviderResult(turn.text, str(exc), None, 0, False, False)) from exc
        finally:
            ended.set()
        if turn.stopped:
            live.reload = spec_of(request.provider).empty_after_cancel
            raise TurnStopped(f"{request.name}: stopped")
        return turn

    @contextmanager
    def _stoppable(self, request: TurnRequest, stop: Callable[[], Awaitable[None]]) -> Iterator[None]:
        """Lets /stop reach the turn: through the caller's `stopping` event when it registered the call in
        Turns itself (one registration per call), else registered here under `conversation`."""
        if request.stopping is None:
            with self._turns.running(request.conversation, stop):
                yield
            return
        stopping = request.stopping

        async def watch() -> None:
            await stopping.wait()
            await stop()

        watcher = asyncio.create_task(watch(), name=f"acp-stop:{request.name}")
        self._watchers.add(watcher)  # kept until done: a stop under way outlives the block
        watcher.add_done_callback(self._watchers.discard)
        try:
            yield
        finally:
            if not stopping.is_set():
                watcher.cancel()

    async def _time_out(self, live: Live) -> None:
        """A turn over `timeout_sec`: cancelled; a process of its own is stopped (a shared one keeps its
        other sessions, and this one answers `cancelled` to the agent)."""
        await live.agent.cancel(live.session_id)
        if not self._is_shared(live.agent):
            await self._discard(live)

    async def _acquire(self, request: TurnRequest, spec: AdapterSpec, stored: bool) -> tuple[Live, str]:
        """The scope's live session, else one loaded or seeded (from the session store, when `stored`);
        returns it (busy) and the seed to prepend. A closed pool starts nothing (a turn it cut short ends)."""
        assert request.scope is not None
        if self._closed:
            raise RuntimeError("the ACP pool is closed")
        key = (request.name, request.scope)
        live = self._live.get(key)
        if live is not None and live.agent.alive and not live.reload:
            live.busy, live.last_used = True, time.monotonic()
            return live, ""
        if live is not None:
            await self._discard(live)
        async with self._locks.setdefault(request.name, asyncio.Lock()):
            await self._make_room(request.name, request.provider.max_live)
            agent = await self._agent_for(request, spec)
            try:
                session_id, seed = await self._open(request, spec, agent, stored)
            except BaseException:
                if not spec.shared:  # a process of its own that holds no session: not kept, not leaked
                    await agent.stop()
                raise
            live = self._live[key] = Live(request.name, request.scope, session_id, agent, busy=True)
        return live, seed

    async def _open(self, request: TurnRequest, spec: AdapterSpec, agent: AgentProcess,
                    stored: bool) -> tuple[str, str]:
        """The scope's stored session loaded into `agent`, else a new one; returns its id and the seed."""
        assert request.scope is not None
        record = self._sessions.session(_key(request.name), request.scope, assigns_ids=False) if stored else None
        if record is not None and record.id and agent.can_load:
            loaded = await self._load(request, agent, record.id, spec)
            if loaded is not None:
                return loaded, ""
        seed = transcript(record.turns) if record is not None else ""
        return await agent.new_session(request.cwd, request.provider.model), seed

    async def _load(self, request: TurnRequest, agent: AgentProcess, session_id: str,
                    spec: AdapterSpec) -> str | None:
        """Loads a stored session; None (and an event) when the adapter cannot."""
        try:
            await agent.load_session(session_id, request.cwd, replay_after=spec.replay_after_load,
                                     model=request.provider.model)
        except AdapterError:
            raise
        except Exception as exc:
            if self._events is not None:
                self._events.emit("provider.session_reset", provider=request.name, scope=request.scope,
                                  session=session_id, reason=f"session/load failed: {exc}"[:300])
            return None
        return session_id

    async def _agent_for(self, request: TurnRequest, spec: AdapterSpec) -> AgentProcess:
        """The provider's shared process (a fresh one when there is none alive, or it is crowded with sessions
        the pool let go), or a new one for claude."""
        if spec.shared:
            agent = self._shared.get(request.name)
            if agent is not None and agent.alive and not self._crowded(agent, request.provider.max_live):
                return agent
            if agent is not None:
                await self._retire(agent)
        agent = AgentProcess(adapter_argv(request.provider), adapter_env(request.provider, request.env),
                             request.cwd, settle_sec=spec.settle_sec)
        await agent.start()
        if spec.shared:
            self._shared[request.name] = agent
        return agent

    async def _make_room(self, name: str, max_live: int) -> None:
        """Evicts the provider's least recently used idle sessions until one more fits (waits while every
        one is busy)."""
        async with self._freed:
            while self.live_count(name) >= max_live:
                idle = sorted((live for live in self._live.values() if live.name == name and not live.busy),
                              key=lambda live: live.last_used)
                if idle:  # a shared process is kept: the new session opens in it
                    await self._evict(idle[0], keep_agent=True)
                else:
                    await self._freed.wait()

    async def _release(self, live: Live) -> None:
        live.busy, live.last_used = False, time.monotonic()
        self._used[live.name] = live.last_used
        if live.agent in self._retired and not self._busy(live.agent):
            await self._drop_sessions_of(live.agent)
        async with self._freed:
            self._freed.notify_all()

    async def _evict(self, live: Live, keep_agent: bool = False) -> None:
        """Closes one session: in the adapter, or with its process when no other session uses it (unless
        `keep_agent`: the provider's shared process then stays warm until idle); it reloads when needed."""
        if self._live.get((live.name, live.scope)) is live:
            del self._live[(live.name, live.scope)]
        if any(other.agent is live.agent for other in self._live.values()) or (
                keep_agent and live.agent in self._shared.values()):
            await live.agent.close_session(live.session_id)
        else:
            await self._drop_agent(live.agent)

    def _crowded(self, agent: AgentProcess, max_live: int) -> bool:
        """Whether a shared process has hosted `max_live` sessions the pool let go: more than the live ones it
        holds before a new session (at most max_live - 1), however few they are."""
        live = {other.session_id for other in self._live.values() if other.agent is agent}
        return len(agent.opened - live) >= max_live

    def _busy(self, agent: AgentProcess) -> bool:
        return any(live.busy for live in self._live.values() if live.agent is agent)

    def _is_shared(self, agent: AgentProcess) -> bool:
        return agent in self._shared.values() or agent in self._retired

    async def _retire(self, agent: AgentProcess) -> None:
        """Takes a shared process out of use: stopped now when no turn runs in it, else after its last one."""
        self._unshare(agent)
        if agent.alive and self._busy(agent):
            self._retired.add(agent)
        else:
            await self._drop_sessions_of(agent)

    async def _drop_sessions_of(self, agent: AgentProcess) -> None:
        """Stops a process and forgets its sessions (idle ones: they load again when next used)."""
        for other in [other for other in self._live.values() if other.agent is agent]:
            self._live.pop((other.name, other.scope), None)
        await self._drop_agent(agent)

    async def _discard(self, live: Live) -> None:
        """A session whose agent died or must be reloaded: every session of that agent goes with it."""
        await self._drop_sessions_of(live.agent)

    async def _drop_agent(self, agent: AgentProcess) -> None:
        self._unshare(agent)
        self._retired.discard(agent)
        await agent.stop()

    def _unshare(self, agent: AgentProcess) -> None:
        for name, shared in list(self._shared.items()):
            if shared is agent:
                del self._shared[name]

    def _save(self, request: TurnRequest, session_id: str, prompt: str, answer: str) -> None:
        assert request.scope is not None
        try:
            self._sessions.save(_key(request.name), request.scope, session_id,
                                {"prompt": prompt[-TURN_CHARS:], "answer": answer[-TURN_CHARS:]})
        except Exception as exc:  # the turn has run: a lost record only costs the memory on a reload
            log.warning("%s: could not keep the session of %s: %s", request.name, request.scope, exc)

    def _start_reaper(self, name: str, idle_sec: float) -> None:
        self._idle_of[name] = idle_sec
        if self._reaper is None:
            self._reaper = asyncio.create_task(self._reap(), name="acp-idle-reaper")

    async def _reap(self) -> None:
        """Closes sessions left unused for their provider's `idle_sec` (looking a few times per idle_sec)."""
        while not self._closed:
            await asyncio.sleep(max(0.05, min(min(self._idle_of.values()) / 4, 30.0)))
            now = time.monotonic()
            for live in list(self._live.values()):
                if not live.busy and now - live.last_used > self._idle_of.get(live.name, 0):
                    async with self._locks.setdefault(live.name, asyncio.Lock()), self._freed:  # no open under way
                        if not live.busy and self._live.get((live.name, live.scope)) is live:
                            await self._evict(live)
            for name, agent in list(self._shared.items()):  # a shared process left with no session
                if now - self._used.get(name, now) > self._idle_of.get(name, 0) and not self._active.get(name) \
                        and not any(live.agent is agent for live in self._live.values()):
                    await self._drop_agent(agent)

    async def retire(self, name: str) -> bool:
        """Closes a provider's sessions and its process, whose settings changed (settings.yaml reloaded): its
        next turn starts them anew and loads the stored session. False while a turn of it runs."""
        if self._active.get(name):
            return False
        async with self._locks.setdefault(name, asyncio.Lock()):
            for live in [live for live in self._live.values() if live.name == name]:
                await self._evict(live)
            shared = self._shared.pop(name, None)
            if shared is not None:
                await shared.stop()
        return True

    async def close(self) -> None:
        """Stops every agent process and the idle reaper; nothing of the pool is left running."""
        self._closed = True
        if self._reaper is not None:
            self._reaper.cancel()
            await asyncio.gather(self._reaper, return_exceptions=True)
        agents = self.agents()
        self._live.clear()
        self._shared.clear()
        self._retired.clear()
        await asyncio.gather(*(agent.stop() for agent in agents), return_exceptions=True)


class _Lost(ProviderFailed):
    """The agent was gone before the turn did anything: the turn runs again in a fresh process."""


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
