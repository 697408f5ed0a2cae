"""What an agent turn may do besides answering: stream its text, ask the chat to approve a tool call, and
be stopped by `/stop` — the small types the provider runners, the approvals and the handler share.

A turn is one call of an agent (a workflow step's or the selector's). Turns register in `Turns` while they
run, by conversation scope (`conv:<channel>/<profile>/<conversation>`), so `/stop` finds and stops what
runs for its conversation in this process.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

log = logging.getLogger("switchyard.orchestrator.live")

TextSink = Callable[[str], None]
"""Receives the answer written so far (the whole text, not the newest piece) while a turn streams."""


@dataclass(frozen=True)
class ApprovalOption:
    """One answer an agent offers to a tool call: its own id, its label, and what it means (ACP's `kind`:
    allow_once, allow_always, reject_once, reject_always)."""

    id: str
    name: str
    kind: str


@dataclass(frozen=True)
class ToolApproval:
    """An agent asks whether it may run a tool: the call's title (e.g. the command), what it will do, and
    the options it offers."""

    title: str
    options: tuple[ApprovalOption, ...]
    detail: str = ""
    tool_call_id: str = ""


PermissionAsker = Callable[[ToolApproval], Awaitable[str | None]]
"""Asks the conversation to approve a tool call; returns the chosen option's id, or None when the call is
denied without a choice (expired, cancelled by /stop, nobody may answer)."""

class TurnStopped(Exception):
    """A turn ended because `/stop` stopped it: not retried and not dead-lettered (the `/stop` reply tells
    the user); a run whose step it was ends `cancelled`."""


StopTurn = Callable[[], Awaitable[None]]
"""Stops one running turn (cancels it, and kills its process when it does not end in time)."""


@dataclass
class Turns:
    """The turns running in this process, by conversation scope: what `/stop` stops."""

    _running: dict[str, list[StopTurn]] = field(default_factory=dict)

    @contextmanager
    def running(self, scope: str | None, stop: StopTurn) -> Iterator[None]:
        """Registers a turn of `scope` for as long as the block runs (a None scope registers nothing)."""
        if scope is None:
            yield
            return
        stops = self._running.setdefault(scope, [])
        stops.append(stop)
        try:
            yield
        finally:
            stops.remove(stop)
            if not stops:
                del self._running[scope]

    def busy(self, scope: str) -> bool:
        """Whether a turn of `scope` runs here now."""
        return bool(self._running.get(scope))

    async def stop(self, scope: str) -> int:
        """Stops every turn of `scope` running here, all at once; returns how many there were."""
        stops = list(self._running.get(scope, ()))
        results = await asyncio.gather(*(stop() for stop in stops), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                log.warning("stopping a turn of %s failed: %s", scope, result)
        return len(stops)
