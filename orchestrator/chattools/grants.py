"""Capability tokens: what a token lets its holder do, and for which conversation and run.

A token names one session scope (a conversation, or a run for `session: run`) for as long as this process
runs, so a live ACP session given the server once at `session/new` keeps reaching it turn after turn; a
turn *binds* the token to itself while it runs (the run, the message it answers, its counters) and
unbinds it when it ends. A call with an unbound token (no turn running, or the turn stopped by `/stop`)
is refused, and a token can never reach a conversation other than the one it was issued for.
A one-shot call with no session scope gets a fresh token per turn.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from gateway.models import IncomingPayload


@dataclass
class TurnBinding:
    """The turn a token acts for right now: its run and step, the message it answers, what it sent."""

    run_id: str
    step_id: str | None
    reply_to: IncomingPayload
    agent: str  # the provider, named as the sender of what the turn sends
    prompt_key: str = ""  # tells apart the turns of one step (for_each items): part of each message's dedup key
    messages: int = 0
    file_bytes: int = 0
    reminders: int = 0  # `remind` calls: part of each reminder's id, so a retried turn does not set it twice


@dataclass
class ToolGrant:
    """One token: the conversation scope it was issued for, and the turn it is bound to (None: none runs)."""

    token: str
    conversation: str
    bound: TurnBinding | None = None
    turns: int = field(default=0)


class ToolGrants:
    """The tokens this process issued, by token and by session scope."""

    def __init__(self) -> None:
        self._by_token: dict[str, ToolGrant] = {}
        self._by_scope: dict[str, ToolGrant] = {}

    def bind(self, conversation: str, scope: str | None, binding: TurnBinding) -> ToolGrant:
        """Binds the scope's token (issued now when it has none; a fresh one for no scope) to a turn."""
        grant = self._by_scope.get(scope) if scope is not None else None
        if grant is None or grant.conversation != conversation:
            grant = ToolGrant(secrets.token_urlsafe(32), conversation)
            self._by_token[grant.token] = grant
            if scope is not None:
                self._by_scope[scope] = grant
        grant.bound = binding
        grant.turns += 1
        return grant

    def unbind(self, grant: ToolGrant, scope: str | None, binding: TurnBinding) -> None:
        """The turn ended (answered, failed or stopped): the token acts for nobody until the next turn."""
        if grant.bound is binding:
            grant.bound = None
        if scope is None:
            self._by_token.pop(grant.token, None)

    def get(self, token: str) -> ToolGrant | None:
        """The grant of a token this process issued, or None."""
        return self._by_token.get(token)
