"""The live ACP sessions of this process and the adapter processes hosting them: one session per (provider,
conversation scope), at most `max_live` per provider, closed after `idle_sec` unused and least-recently-used
first when a new one needs room.

codex and gemini host every session of a provider in one process; claude gets one process per session.
A session the pool lets go is closed in a shared process where the adapter can (codex; gemini cannot),
and the process is retired once it has hosted `max_live` such sessions (more than its live ones, as a new
session needs room; codex-acp keeps much of a closed session's memory): new sessions go to a fresh
process, and the old one is stopped as soon as no turn runs in it (its idle sessions load again when
next used). So an adapter's memory follows `max_live`, not the number of conversations.

What a turn does in a session it gets from the pool (and how a session is opened) is session.py's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from orchestrator.agents.acp.agent import AgentProcess
from orchestrator.agents.acp.specs import AdapterSpec, adapter_argv, adapter_env
from orchestrator.agents.request import ProviderCall

Opener = Callable[[AgentProcess], Awaitable[tuple[str, str]]]
"""Opens the scope's session in an adapter process: returns its id and the seed its first prompt carries."""


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


class AcpPool:
    """Live sessions by (provider, scope); `close` stops every agent process."""

    def __init__(self) -> None:
        self._live: dict[tuple[str, str], Live] = {}
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

    @contextmanager
    def in_use(self, name: str, idle_sec: float) -> Iterator[None]:
        """Counts a turn of the provider as running (its process is kept) for as long as the block runs; starts
        the idle reaper. A closed pool starts nothing."""
        if self._closed:
            raise RuntimeError("the ACP pool is closed")
        self._start_reaper(name, idle_sec)
        self._active[name] = self._active.get(name, 0) + 1
        try:
            yield
        finally:
            self._active[name] -= 1

    async def time_out(self, live: Live) -> None:
        """A turn over `timeout_sec`: cancelled; a process of its own is stopped (a shared one keeps its
        other sessions, and this one answers `cancelled` to the agent)."""
        await live.agent.cancel(live.session_id)
        if not self._is_shared(live.agent):
            await self.discard(live)

    async def acquire(self, call: ProviderCall, spec: AdapterSpec, opener: Opener) -> tuple[Live, str]:
        """The scope's live session, else one `opener` opens in the provider's process; returns it (busy) and
        the seed to prepend. A closed pool starts nothing (a turn it cut short ends)."""
        assert call.scope is not None
        if self._closed:
            raise RuntimeError("the ACP pool is closed")
        if call.turn.sandbox is not None:  # a sandbox holds one scope: its adapter is a process of its own
            spec = replace(spec, shared=False)
        key = (call.name, call.scope)
        live = self._live.get(key)
        if live is not None and live.agent.alive and not live.reload:
            live.busy, live.last_used = True, time.monotonic()
            return live, ""
        if live is not None:
            await self.discard(live)
        async with self._locks.setdefault(call.name, asyncio.Lock()):
            await self._make_room(call.name, call.provider.max_live)
            agent = await self._agent_for(call, spec)
            try:
                session_id, seed = await opener(agent)
            except BaseException:
                if not spec.shared:  # a process of its own that holds no session: not kept, not leaked
                    await agent.stop()
                raise
            live = self._live[key] = Live(call.name, call.scope, session_id, agent, busy=True)
        return live, seed

    async def _agent_for(self, call: ProviderCall, spec: AdapterSpec) -> AgentProcess:
        """The provider's shared process (a fresh one when there is none alive, or it is crowded with sessions
        the pool let go), or a new one for claude."""
        if spec.shared:
            agent = self._shared.get(call.name)
            if agent is not None and agent.alive and not self._crowded(agent, call.provider.max_live):
                return agent
            if agent is not None:
                await self._retire(agent)
        agent = AgentProcess(adapter_argv(call.provider), adapter_env(call.provider, call.turn.env),
                             call.turn.cwd, settle_sec=spec.settle_sec, sandbox=call.turn.sandbox)
        await agent.start()
        if spec.shared:
            self._shared[call.name] = agent
        return agent

    async def _make_room(self, name: str, max_live: int) -> None:
        """Evicts the provider's least recently used idle sessions until one more fits (waits while every
        one is busy)."""
        async with self._freed:
            while self.live_count(name) >= max_live:
                idle = sorted((live for live in self._live.values() if live.name == name and not live.busy),
                              key=lambda live: live.last_used)
                if idle:  # a shared process is kept: the new session opens in it
                    await self.evict(idle[0], keep_agent=True)
                else:
                    await self._freed.wait()

    async def release(self, live: Live) -> None:
        """A turn of the session ended: it is idle again (and a retired process with no turn left stops)."""
        live.busy, live.last_used = False, time.monotonic()
        self._used[live.name] = live.last_used
        if live.agent in self._retired and not self._busy(live.agent):
            await self._drop_sessions_of(live.agent)
        async with self._freed:
            self._freed.notify_all()

    async def evict(self, live: Live, keep_agent: bool = False) -> None:
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

    async def discard(self, live: Live) -> None:
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
                            await self.evict(live)
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
                await self.evict(live)
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
