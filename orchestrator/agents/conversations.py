"""A conversation's several agent sessions as the chat sees them: `/new`, `/sessions`, `/resume N`.

`/new` starts a fresh session (every provider of the conversation starts a new CLI or live session at its next
turn; the earlier ones are kept), `/resume N` switches back to session N, whose CLI sessions are resumed and
whose live ACP sessions are continued or loaded again (`session/load`). A forum topic or thread is a
conversation of its own, so each has its own sessions.

The selector's memory of the conversation (ConversationHistory, the last exchanges) follows the session too:
`/new` starts with none, `/resume N` brings session N's back. A fresh session is a clean slate: a selector that
still saw the exchanges of the session left would answer follow-ups from it.

The numbering and records are SessionStore's (sessions.py); this module only says it in words.
"""

from __future__ import annotations

from orchestrator.agents.sessions import ConversationHistory, SessionInfo, SessionStore

SESSION_COMMANDS = frozenset({"/new", "/sessions", "/resume"})
LISTED = 20  # the newest sessions `/sessions` shows


class ConversationSessions:
    """Answers the session commands of a conversation and counts its answered messages per session."""

    def __init__(self, sessions: SessionStore, history: ConversationHistory):
        self._sessions = sessions
        self._history = history

    def answer(self, command: str, text: str, scope: str) -> str:
        """The reply to a session command (`command` one of SESSION_COMMANDS) of the conversation `scope`."""
        if command == "/new":
            return self._new(scope)
        if command == "/sessions":
            return listing_text(self._sessions.listing(scope, self._history.seed(scope)))
        return self._resume(text, scope)

    def count(self, scope: str, text: str) -> None:
        """Counts an answered message in the conversation's current session (its first words kept), before
        the selector remembers the exchange (the seed of an unnumbered conversation counts what came before)."""
        self._sessions.count_turn(scope, text, self._history.seed(scope))

    def attach(self, scope: str, key: str, session_id: str) -> int:
        """Makes a CLI session started elsewhere the conversation's next and current session; its number."""
        leaving = self._sessions.current_number(scope)
        number = self._sessions.attach(scope, key, session_id, self._history.seed(scope))
        self._history.switch(scope, leaving, number)
        return number

    def _new(self, scope: str) -> str:
        leaving = self._sessions.current_number(scope)
        number = self._sessions.start_new(scope, self._history.seed(scope))
        self._history.switch(scope, leaving, number)
        return (f"Started session {number}: the agent starts afresh. Session {leaving} is kept: "
                f"/sessions lists them, /resume {leaving} goes back.")

    def _resume(self, text: str, scope: str) -> str:
        words = text.split()
        if len(words) < 2 or not words[1].lstrip("#").isdigit():
            return "Say which session: /resume N (/sessions lists them)."
        number = int(words[1].lstrip("#"))
        leaving = self._sessions.current_number(scope)
        if not self._sessions.switch(scope, number, self._history.seed(scope)):
            return f"There is no session {number} in this conversation (/sessions lists them)."
        if number != leaving:
            self._history.switch(scope, leaving, number)
        info = next(info for info in self._sessions.listing(scope) if info.number == number)
        return f"Back to session {number}{_about(info)}: the agent continues where it left off."


def listing_text(infos: list[SessionInfo]) -> str:
    """`/sessions`: one line a session, newest last, the current one marked."""
    lines = [f"{'▶' if info.current else ' '} {info.number}. {_line(info)}" for info in infos[-LISTED:]]
    hidden = len(infos) - LISTED
    head = f"Sessions of this conversation ({hidden} older not shown):" if hidden > 0 else \
        "Sessions of this conversation:"
    return "\n".join([head, *lines, "/new starts another, /resume N switches to one."])


def _line(info: SessionInfo) -> str:
    when = info.started.replace("T", " ")[:16] + " UTC" if info.started else "earlier"
    turns = f"{info.turns} turn{'' if info.turns == 1 else 's'}"
    words = f" · “{info.first_words}”" if info.first_words else ""
    attached = f" · attached ({info.attached})" if info.attached else ""
    return f"{when} · {turns}{words}{attached}"


def _about(info: SessionInfo) -> str:
    return f" ({_line(info)})"
