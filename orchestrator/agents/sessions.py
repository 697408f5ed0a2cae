"""CLI sessions per conversation or run, and each conversation's recent exchanges.

A provider preset continues the CLI session of its scope (`conv:<channel>/<profile>/<conversation>` or
`run:<runId>`): the map from (provider, scope) to the CLI's session id is one small record each, so it
survives restarts. Calls sharing a session run one at a time. The records live in `<home>/sessions/`
(one JSON file each), or in the database on the postgres backend (orchestrator/storage/postgres/sessions.py), where
every host sees them; only reading and writing a record differs between the two.

A conversation may hold several sessions (`/new`, `/resume N`, `switchyard sessions attach`): its index record
(key `(scope,)`) numbers them from 1 and says which one it continues. Session 1's records keep the scope itself
as it always did, so a home made before sessions were numbered continues its one session as session 1; session
N > 1 lives under the scope `<scope>#session-N` (`session_scope`), which every part keyed by scope (the records,
the ids of our own, the live ACP pool) then keeps apart without knowing of numbers.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gateway.home import atomic_write
from gateway.scope import ConversationScope
from gateway.storable import safe_json
from gateway.telemetry.events import utc_now_iso
from orchestrator.agents.clis import Session

SESSION_NAMESPACE = uuid.UUID("6f1d2a34-3a5c-4b8e-9a51-5d0c2b7e9f10")
MAX_TURNS = 20
HISTORY_EXCHANGES = 6
HISTORY_BYTES = 4096
HISTORY_TEXT_CHARS = 600
FIRST_WORDS_CHARS = 80
KEPT_HISTORIES = 20  # the sessions a conversation left whose exchanges are kept for `/resume`
SESSION_MARK = "#session-"

Record = dict[str, Any]
Change = Callable[[Record], Record]
"""Gets the stored record ({} when there is none) and returns the one to store."""


class Records(Protocol):
    """Where session or history records are kept, each under a key of a few strings."""

    def read(self, key: tuple[str, ...]) -> Record:
        """The record stored under `key`, {} when there is none."""

    def update(self, key: tuple[str, ...], change: Change, *, durable: bool = True) -> None:
        """Stores `change(current record)` under `key`. With `durable` False the change is one whose loss in a
        crash is harmless (a turn counted): a store may then keep it less firmly, as long as a crash leaves the
        record either changed or as it was before, never lost."""

    def every(self) -> Iterator[Record]:
        """Every record stored (each names its own scope), in no particular order: for the operator's listing."""


def _file_name(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:32] + ".json"


class FileRecords:
    """Records as JSON files in one folder of the home, named by a hash of their key."""

    def __init__(self, folder: Path, *, fsync: bool):
        self.folder = folder
        self._fsync = fsync

    def read(self, key: tuple[str, ...]) -> Record:
        try:
            value = json.loads((self.folder / _file_name(*key)).read_bytes())
        except (FileNotFoundError, ValueError):
            return {}
        return value if isinstance(value, dict) else {}

    def update(self, key: tuple[str, ...], change: Change, *, durable: bool = True) -> None:
        """Not `durable`: the new record is synced before its rename, the folder after it is not (a crash may
        bring back the record before this change, whole: one fsync, not two)."""
        path, data = self.folder / _file_name(*key), safe_json(change(self.read(key)))  # an answer's NUL
        try:
            atomic_write(path, data, fsync=self._fsync, sync_folder=durable)
        except FileNotFoundError:  # the folder's first record (a mkdir each time was a call per chat message)
            self.folder.mkdir(parents=True, exist_ok=True)
            atomic_write(path, data, fsync=self._fsync, sync_folder=durable)

    def every(self) -> Iterator[Record]:
        for path in sorted(self.folder.glob("*.json")):  # not history/, a folder of its own
            try:
                value = json.loads(path.read_bytes())
            except (FileNotFoundError, ValueError):
                continue
            if isinstance(value, dict):
                yield value


def session_scope(scope: str, number: int) -> str:
    """The scope session `number` of conversation `scope` is kept under: the conversation's own for session 1."""
    return scope if number == 1 else f"{scope}{SESSION_MARK}{number}"


@dataclass(frozen=True)
class SessionInfo:
    """One session of a conversation as `/sessions` and `switchyard sessions list` show it."""

    number: int
    started: str | None  # when it was started; None: session 1 of a conversation older than numbered sessions
    first_words: str
    turns: int
    current: bool
    attached: str | None = None  # the provider whose CLI session the operator attached (`sessions attach`)


class SessionStore:
    """Which CLI session each (provider, scope) continues; ids for CLIs that take one are uuid5 of the
    scope and a generation that grows when the CLI forgot the session. A conversation's numbered sessions are
    in its index record (module docstring); `seed` arguments describe session 1 of a conversation that has
    no index yet (its first words and turns, read from its history by the caller)."""

    def __init__(self, records: Records):
        self.records = records
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    @asynccontextmanager
    async def hold(self, provider: str, scope: str) -> AsyncIterator[None]:
        """Runs the calls of one session one at a time (in this process)."""
        lock = self._locks.setdefault((provider, scope), asyncio.Lock())
        async with lock:
            yield

    def session(self, provider: str, scope: str, *, assigns_ids: bool) -> Session:
        """The session to continue, or a new one (with our own id when the CLI accepts one)."""
        record = self.records.read((provider, scope))
        turns = list(record.get("turns", []))
        if record.get("sessionId"):
            return Session(str(record["sessionId"]), resume=True, turns=turns, kept=bool(record.get("attached")))
        if record.get("started") and not assigns_ids:  # a CLI without sessions: only turns kept
            return Session(None, resume=False, turns=turns)
        generation = int(record.get("generation", 0))
        new_id = None if not assigns_ids else str(uuid.uuid5(SESSION_NAMESPACE, f"{provider}|{scope}|{generation}"))
        return Session(new_id, resume=False, turns=turns)

    def save(self, provider: str, scope: str, session_id: str | None, turn: dict[str, str] | None = None) -> None:
        """Records the session a call used (and the turn, for CLIs without sessions)."""

        def change(record: Record) -> Record:
            record = record or {"provider": provider, "scope": scope, "createdAt": utc_now_iso()}
            record.update(started=True, updatedAt=utc_now_iso())
            if session_id and session_id != record.get("sessionId"):
                record.pop("attached", None)  # the operator's session was forked: the fork is the chat's own
            if session_id:
                record["sessionId"] = session_id
            if turn is not None:
                record["turns"] = [*record.get("turns", []), turn][-MAX_TURNS:]
            return record

        self.records.update((provider, scope), change)

    def forget(self, provider: str, scope: str, *, assigns_ids: bool) -> Session:
        """Drops a session the CLI no longer knows; returns the fresh one to start instead."""

        def change(record: Record) -> Record:
            record = record or {"provider": provider, "scope": scope, "createdAt": utc_now_iso()}
            record["generation"] = int(record.get("generation", 0)) + 1
            record.pop("sessionId", None)
            record["started"] = False
            return record

        self.records.update((provider, scope), change)
        return self.session(provider, scope, assigns_ids=assigns_ids)


    # --- a conversation's numbered sessions ------------------------------------------------------------

    def current(self, scope: str) -> str:
        """The session scope a call of `scope` continues now: a conversation's current session (its own scope
        for session 1, and for a conversation never switched), a run's scope as it is."""
        if ConversationScope.parse(scope) is None:
            return scope
        return session_scope(scope, int(self.records.read((scope,)).get("current", 1)))

    def current_number(self, scope: str) -> int:
        """The number of the conversation's current session."""
        return int(self.records.read((scope,)).get("current", 1))

    def listing(self, scope: str, seed: Record | None = None) -> list[SessionInfo]:
        """The conversation's sessions, oldest first."""
        return _infos(self.records.read((scope,)) or _first_index(scope, seed))

    def start_new(self, scope: str, seed: Record | None = None, *, attached: str | None = None) -> int:
        """Starts the conversation's next session and makes it the current one (the others are kept);
        returns its number."""
        number = 0

        def change(index: Record) -> Record:
            nonlocal number
            index = index or _first_index(scope, seed)
            number = max(int(entry["number"]) for entry in index["sessions"]) + 1
            entry = {"number": number, "startedAt": utc_now_iso(), "firstWords": "", "turns": 0}
            index["sessions"].append({**entry, "attached": attached} if attached else entry)
            index["current"] = number
            return index

        self.records.update((scope,), change)
        return number

    def switch(self, scope: str, number: int, seed: Record | None = None) -> bool:
        """Makes session `number` the conversation's current one; False when it has no such session."""
        found = False

        def change(index: Record) -> Record:
            nonlocal found
            index = index or _first_index(scope, seed)
            found = any(int(entry["number"]) == number for entry in index["sessions"])
            if found:
                index["current"] = number
            return index

        self.records.update((scope,), change)
        return found

    def count_turns(self, scope: str, words: list[str], seed: Record | None = None) -> None:
        """Counts answered messages (`words`: each one's text, oldest first) in the conversation's current
        session (the first one's words kept).

        The count is what `/sessions` and `switchyard sessions list` show to tell sessions apart; nothing
        decides by it. So it is written less firmly than `/new`, `/resume` and `attach` (`durable=False`):
        a crash may lose the last counts, and leaves the index as it was before them, its `current` and its
        sessions whole. Not without any sync: the same record holds `current`, and a record renamed in before
        its contents reached the disk could come back empty after a power cut, which would lose every session
        of the conversation, not one count."""

        def change(index: Record) -> Record:
            index = index or _first_index(scope, seed)
            for entry in index["sessions"]:
                if int(entry["number"]) == int(index.get("current", 1)):
                    entry["turns"] = int(entry.get("turns", 0)) + len(words)
                    entry["firstWords"] = entry.get("firstWords") or first_words(words[0])
                    entry["lastAt"] = utc_now_iso()
            return index

        if words:
            self.records.update((scope,), change, durable=False)

    def attach(self, scope: str, key: str, session_id: str, seed: Record | None = None) -> int:
        """Adds a CLI session started elsewhere (at a terminal) as the conversation's next session, continued
        by the provider whose records are kept under `key`, and makes it the current one; returns its number."""
        number = self.start_new(scope, seed, attached=key)
        kept = session_scope(scope, number)
        self.records.update((key, kept), lambda record: {
            "provider": key, "scope": kept, "createdAt": utc_now_iso(), "updatedAt": utc_now_iso(),
            "started": True, "sessionId": session_id, "attached": True})
        return number

    def conversations(self) -> dict[str, list[SessionInfo]]:
        """Every conversation that has a session, with its sessions (for the operator): those with an index,
        and those a home made before sessions were numbered (their one session is session 1)."""
        found: dict[str, list[SessionInfo]] = {}
        unnumbered: set[str] = set()
        for record in self.records.every():
            scope = str(record.get("scope", ""))
            if isinstance(record.get("sessions"), list):
                found[scope] = _infos(record)
            elif ConversationScope.parse(scope) is not None and SESSION_MARK not in scope:
                unnumbered.add(scope)
        for scope in unnumbered - found.keys():
            found[scope] = _infos(_first_index(scope, None))
        return dict(sorted(found.items()))


def first_words(text: str) -> str:
    """The first words of a message, on one line, as a session's listing shows them."""
    line = " ".join(text.split())
    return line if len(line) <= FIRST_WORDS_CHARS else line[:FIRST_WORDS_CHARS].rsplit(" ", 1)[0] + "…"


def _first_index(scope: str, seed: Record | None) -> Record:
    """The index of a conversation that has none yet: its one session, numbered 1."""
    seed = seed or {}
    first = {"number": 1, "startedAt": seed.get("startedAt"), "firstWords": str(seed.get("firstWords", "")),
             "turns": int(seed.get("turns", 0))}
    return {"kind": "conversation", "scope": scope, "current": 1, "sessions": [first]}


def _infos(index: Record) -> list[SessionInfo]:
    current = int(index.get("current", 1))
    return [SessionInfo(int(entry["number"]), entry.get("startedAt"), str(entry.get("firstWords", "")),
                        int(entry.get("turns", 0)), int(entry["number"]) == current, entry.get("attached"))
            for entry in index.get("sessions", [])]


class ConversationHistory:
    """The last few exchanges of each conversation, so a stateless selector understands follow-ups."""

    def __init__(self, records: Records):
        self.records = records

    def recent(self, scope: str) -> list[dict[str, str]]:
        """The latest exchanges (oldest first), capped to HISTORY_BYTES in all."""
        kept: list[dict[str, str]] = []
        size = 0
        for exchange in reversed(self.records.read((scope,)).get("exchanges", [])):
            size += len(json.dumps(exchange, ensure_ascii=False).encode())
            if size > HISTORY_BYTES:
                break
            kept.append(exchange)
        return kept[::-1]

    def add(self, scope: str, user: str, answer: str) -> None:
        """Appends one exchange, keeping the last HISTORY_EXCHANGES."""
        exchange = {"user": _clip(user), "assistant": _clip(answer)}

        def change(record: Record) -> Record:
            record = record or {"scope": scope}
            record["exchanges"] = [*record.get("exchanges", []), exchange][-HISTORY_EXCHANGES:]
            return record

        self.records.update((scope,), change)

    def switch(self, scope: str, leaving: int, entering: int) -> None:
        """The conversation changes sessions: the exchanges of the one it leaves are kept aside (for the last
        KEPT_HISTORIES sessions), those of the one it enters come back (none for a new one)."""

        def change(record: Record) -> Record:
            record = record or {"scope": scope}
            kept = dict(record.get("kept", {}))
            kept.pop(str(leaving), None)  # to the end: the newest left is the last dropped
            kept[str(leaving)] = record.get("exchanges", [])
            record["exchanges"] = kept.pop(str(entering), [])
            record["kept"] = dict(list(kept.items())[-KEPT_HISTORIES:])
            return record

        self.records.update((scope,), change)

    def seed(self, scope: str) -> Record:
        """What the history tells of a conversation's first session, before it had an index: its first kept
        words and how many exchanges are kept (a lower bound of its turns)."""
        exchanges = self.records.read((scope,)).get("exchanges", [])
        return {"firstWords": first_words(exchanges[0].get("user", "")) if exchanges else "",
                "turns": len(exchanges)}


def _clip(text: str) -> str:
    return text if len(text) <= HISTORY_TEXT_CHARS else text[:HISTORY_TEXT_CHARS] + "…"
