"""Routes a `transport: acp` preset's call to the live-session pool, or back to the one-shot preset when
the adapter is missing or cannot start (once per provider: a warning, the event `provider.acp_fallback`).

The pool (and the `acp` SDK) is loaded only when an acp provider first runs."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from gateway.settings import ProviderSettings
from gateway.telemetry.events import EventLog
from orchestrator.agents.acp.specs import adapter_argv, adapter_path, spec_of, temp_home_problem
from orchestrator.agents.live import TurnStopped
from orchestrator.agents.request import ProviderCall
from orchestrator.agents.sessions import SessionStore
from orchestrator.agents.spawn import ProviderFailed, ProviderResult

if TYPE_CHECKING:
    from orchestrator.agents.acp.pool import AcpPool
    from orchestrator.agents.acp.session import LiveSessions

log = logging.getLogger(__name__)


class AcpRoute:
    """The live sessions of one ProviderRunner, and which providers fell back to one-shot."""

    def __init__(self, sessions: SessionStore, events: EventLog | None):
        self._sessions, self._events = sessions, events
        self.pool: AcpPool | None = None
        self._live: LiveSessions | None = None  # turns in the pool's sessions, once an acp provider first runs
        self.fallen_back: dict[str, str] = {}  # provider name -> why it runs one-shot
        self._checked: set[str] = set()  # providers whose environment was looked at
        self._settings_of: dict[str, ProviderSettings] = {}  # what each provider's sessions were started with

    async def run(self, call: ProviderCall) -> ProviderResult | None:
        """The turn's result from a live session (a one-off one for a stateless call); None: run the one-shot
        preset instead (claude's stateless calls, or an adapter that is missing or cannot start)."""
        name, provider, env = call.name, call.provider, call.turn.env
        await self._follow(name, provider)
        if (call.scope is None and not spec_of(provider).shared) or name in self.fallen_back:
            return None  # claude's stateless calls: a process per call would cost more than one-shot
        if adapter_path(provider, env) is None:
            self._fall_back(name, f"the ACP adapter `{adapter_argv(provider)[0]}` was not found on PATH "
                                  f"(install: {spec_of(provider).install}, or set `acp_command`)")
            return None
        try:
            from orchestrator.agents.acp.agent import AdapterUnavailable
            from orchestrator.agents.acp.pool import AcpPool
            from orchestrator.agents.acp.session import LiveSessions
        except ImportError as exc:
            self._fall_back(name, f"the `acp` extra is not installed ({exc}): pip install -e '.[acp]' in the clone")
            return None
        if self.pool is None or self._live is None:
            self.pool = AcpPool()
            self._live = LiveSessions(self.pool, self._sessions, self._events)
        if name not in self._checked:
            self._checked.add(name)
            if problem := temp_home_problem(env):
                log.warning("%s: %s", name, problem)
        try:
            return await self._live.run(call)
        except AdapterUnavailable as exc:
            self._fall_back(name, str(exc))
            return None
        except (ProviderFailed, TurnStopped):
            raise
        except Exception as exc:  # a session the adapter would not create or load: retried later
            raise ProviderFailed(name, ProviderResult("", f"{type(exc).__name__}: {exc}", None, 0, False,
                                                      False)) from exc

    async def _follow(self, name: str, provider: ProviderSettings) -> None:
        """Forgets what was found of a provider whose settings changed since its sessions started (settings.yaml
        reloaded): its fallback to one-shot, and its live sessions once no turn of it runs."""
        before = self._settings_of.setdefault(name, provider)
        if before == provider:
            return
        self.fallen_back.pop(name, None)
        self._checked.discard(name)
        if self.pool is None or await self.pool.retire(name):
            self._settings_of[name] = provider

    def _fall_back(self, name: str, reason: str) -> None:
        self.fallen_back[name] = reason
        log.warning("%s: %s: running the one-shot preset instead", name, reason)
        if self._events is not None:
            self._events.emit("provider.acp_fallback", provider=name, reason=reason)

    async def close(self) -> None:
        """Stops every live agent process."""
        if self.pool is not None:
            await self.pool.close()
