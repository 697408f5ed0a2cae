"""A conversation's several agent sessions as the chat sees them: `/new`, `/sessions`, `/resume N`.

`/new` starts a fresh session (every provider of the conversation starts a new CLI or live session at its next
turn; the earlier ones are kept), `/resume N` switches back to session N, whose CLI sessions are resumed and
whose live ACP sessions are continued or loaded again (`session/load`). A forum topic or thread is a
conversation of its own, so each has its own sessions.

The selector's memory of the conversation (ConversationHistory, the last exchanges) follows the session too:
`/new` starts with none, `/resume N` brings session N's back. A fresh session is a clean slate: a selector that
still saw the exchanges of the session left would answer follow-ups from it.

The numbering and records are SessionStore's (sessions.py); this module only says it in words, and counts the
answered messages of each session (what `/sessions` shows of it) in memory, writing them at most FLUSH_SEC later.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from orchestrator.agents.sessions import ConversationHistory, SessionInfo, SessionStore

log = logging.getLogger("switchyard.orchestrator")

SESSION_COMMANDS = frozenset({"/new", "/sessions", "/resume"})
LISTED = 20  # the newest sessions `/sessions` shows
FLUSH_SEC = 1.0  # how long an answered message's count may stay in memory before it is written


class ConversationSessions:
    """Answers the session commands of a conversation and counts its answered messages per session.

    A count was a write of the conversation's index (with an fsync) per chat message, for a figure nothing
    decides by; counts are now kept in memory and written together, a conversation's at most once per
    `flush_sec` (a crash loses at most those). The first count this process makes in a conversation is written
    at once: the index may not exist yet, and it is then seeded from the history before the selector
    remembers this exchange. A session command writes its conversation's counts before it changes the
    current session, under the same lock as every write of counts (a write of counts reads the index and
    writes it back: a `/new` between the two would be undone)."""

    def __init__(self, sessions: SessionStore, history: ConversationHistory, *, flush_sec: float = FLUSH_SEC):
        self._sessions = sessions
        self._history = history
        self._flush_sec = flush_sec
        self._pending: dict[str, list[str]] = {}  # scope -> the texts counted and not yet written, oldest first
        self._holding = threading.Lock()  # `_pending`, added to on the loop and taken in threads
        self._indexed: set[str] = set()  # scopes this process has counted in: their index exists
        self._writing = threading.Lock()  # a write of counts or a session command, one at a time
        self._timer: asyncio.TimerHandle | None = None
        self._flushes: set[asyncio.Task[None]] = set()

    def answer(self, command: str, text: str, scope: str) -> str:
        """The reply to a session command (`command` one of SESSION_COMMANDS) of the conversation `scope`."""
        with self._writing:
            self._write_kept(scope)
            if command == "/new":
                return self._new(scope)
            if command == "/sessions":
                return listing_text(self._sessions.listing(scope, self._history.seed(scope)))
            return self._resume(text, scope)

    async def count(self, scope: str, text: str) -> None:
        """Counts an answered message in the conversation's current session (its first words kept), before
        the selector remembers the exchange; written at once the first time, else within `flush_sec`."""
        if scope not in self._indexed:
            await asyncio.to_thread(self._count_first, scope, text)
            return
        with self._holding:
            self._pending.setdefault(scope, []).append(text)
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._flush_sec, self._flush_later)

    def _count_first(self, scope: str, text: str) -> None:
        with self._writing:
            self._write(scope, [text], seeded=True)
        self._indexed.add(scope)

    def _flush_later(self) -> None:
        self._timer = None
        task = asyncio.get_running_loop().create_task(asyncio.to_thread(self.flush))
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    def flush(self) -> None:
        """Writes every count kept in memory."""
        with self._holding:
            scopes = list(self._pending)
        for scope in scopes:
            with self._writing:
                self._write_kept(scope)

    async def close(self) -> None:
        """Writes the counts kept in memory (at the handler's stop)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        await asyncio.gather(*self._flushes, return_exceptions=True)
        await asyncio.to_thread(self.flush)

    def _write_kept(self, scope: str) -> None:
        """Writes the counts of `scope` kept in memory (the caller holds `_writing`)."""
        with self._holding:
            texts = self._pending.pop(scope, [])
        self._write(scope, texts)

    def _write(self, scope: str, texts: list[str], *, seeded: bool = False) -> None:
        try:
            self._sessions.count_turns(scope, texts, self._history.seed(scope) if seeded else None)
        except Exception as exc:  # (OSError, a database error): the messages were answered; only counts are lost
            log.warning("could not count %d message(s) in their conversation's session: %s", len(texts), exc)

    def attach(self, scope: str, key: str, session_id: str) -> int:
        """Makes a CLI session started elsewhere the conversation's next and current session; its number."""
        with self._writing:
            self._write_kept(scope)
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
