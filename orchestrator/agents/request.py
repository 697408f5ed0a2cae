"""One agent turn as its caller asks for it (`TurnRequest`), and as a runner runs it (`ProviderCall`): the one
value that goes down the agent path, from `ProviderRunner.run` to the built-in, the argv process, the one-shot
preset or the live ACP session it chooses."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.settings import ProviderSettings
from orchestrator.agents.live import PermissionAsker, TextSink
from orchestrator.agents.sandbox import Sandbox
from orchestrator.usage.records import Payer

if TYPE_CHECKING:
    from orchestrator.chattools.server import ToolEndpoint

NoteSink = Callable[[str], None]
"""Receives short notes on what a running agent does (the tool it uses, the first line it writes)."""


@dataclass(frozen=True)
class TurnRequest:
    """What one call of a provider is asked: its prompt, where it runs, and how.

    A workflow step passes its conversation and run; the provider's `session` setting picks which
    session it continues. The selector and diagnostics pass neither (stateless) and force `answer`.
    """

    prompt: str
    cwd: Path
    request: dict[str, Any] = field(default_factory=dict)  # what the provider reads: a built-in's argument, the file's
    request_file: Path | None = None  # where the request is written for a provider that reads it (SWITCHYARD_REQUEST)
    env: Mapping[str, str] = field(default_factory=dict)  # the provider's variables besides the gateway's own
    conversation: str | None = None  # `conv:<channel>/<profile>/<conversation>`
    run: str | None = None
    mode: str | None = None  # None: the provider's own `mode`, else `answer`
    on_note: NoteSink | None = None
    on_text: TextSink | None = None  # the answer so far, while it streams (a live session's chunks)
    ask: PermissionAsker | None = None  # asks the chat to approve a tool call; None: the provider's own rule
    stopped_by: str | None = None  # the conversation whose `/stop` stops this call; None: `conversation`
    payer: Payer | None = None  # whom the turn is counted against (its limits checked first); None: nobody
    reserved: tuple[str, ...] = ()  # the payer's kinds this turn's caller reserved it for already (UsageMeter.turn)
    sandbox: Sandbox | None = None  # its scope's bubblewrap sandbox (None: unconfined, unless the provider says bwrap)
    chat_tools: bool = True  # False: the agent says `chat_tools: false` (no MCP chat tools for its turns)
    tools: ToolEndpoint | None = None  # where the turn reaches its chat tools (set by ProviderRunner, not the caller)

    def turn_scope(self) -> str | None:
        """The conversation scope this call registers under in `Turns` (None: `/stop` cannot reach it)."""
        return self.stopped_by or self.conversation

    def session_scope(self, provider: ProviderSettings) -> str | None:
        """The session scope for this provider, or None for a stateless call."""
        if provider.session == "conversation":
            return self.conversation
        return f"run:{self.run}" if provider.session == "run" and self.run else None


@dataclass(frozen=True)
class ProviderCall:
    """A turn as a runner runs it: the provider chosen, the request with the whole environment its process gets,
    the session scope it continues (None: a stateless call), and the event `/stop` sets."""

    name: str
    provider: ProviderSettings
    turn: TurnRequest
    scope: str | None
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    @classmethod
    def of(cls, name: str, provider: ProviderSettings, turn: TurnRequest,
           stop: asyncio.Event | None = None) -> ProviderCall:
        """The call of `turn` on a provider, in the session scope the provider's `session` setting picks."""
        return cls(name, provider, turn, turn.session_scope(provider), stop or asyncio.Event())

    @property
    def mode(self) -> str:
        """The mode the preset runs in: the caller's, else the provider's, else `answer`."""
        return self.turn.mode or self.provider.mode or "answer"
