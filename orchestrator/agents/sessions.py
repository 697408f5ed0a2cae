"""CLI sessions per conversation or run, and each conversation's recent exchanges.

A provider preset continues the CLI session of its scope (`conv:<channel>/<profile>/<conversation>` or
`run:<runId>`): the map from (provider, scope) to the CLI's session id is one small record each, so it
survives restarts. Calls sharing a session run one at a time. The records live in `<home>/sessions/`
(one JSON file each), or in the database on the postgres backend (orchestrator/storage/postgres/sessions.py), where
every host sees them; only reading and writing a record differs between the two.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

from gateway.home import atomic_write
from gateway.storable import safe_json
from gateway.telemetry.events import utc_now_iso
from orchestrator.agents.clis import Session

SESSION_NAMESPACE = uuid.UUID("6f1d2a34-3a5c-4b8e-9a51-5d0c2b7e9f10")
MAX_TURNS = 20
HISTORY_EXCHANGES = 6
HISTORY_BYTES = 4096
HISTORY_TEXT_CHARS = 600

Record = dict[str, Any]
Change = Callable[[Record], Record]
"""Gets the stored record ({} when there is none) and returns the one to store."""


class Records(Protocol):
    """Where session or history records are kept, each under a key of a few strings."""

    def read(self, key: tuple[str, ...]) -> Record:
        """The record stored under `key`, {} when there is none."""

    def update(self, key: tuple[str, ...], change: Change) -> None:
        """Stores `change(current record)` under `key`."""


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

    def update(self, key: tuple[str, ...], change: Change) -> None:
        record = change(self.read(key))
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write(self.folder / _file_name(*key), safe_json(record), fsync=self._fsync)  # an answer's NUL


class SessionStore:
    """Which CLI session each (provider, scope) continues; ids for CLIs that take one are uuid5 of the
    scope and a generation that grows when the CLI forgot the session."""

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
            return Session(str(record["sessionId"]), resume=True, turns=turns)
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


def _clip(text: str) -> str:
    return text if len(text) <= HISTORY_TEXT_CHARS else text[:HISTORY_TEXT_CHARS] + "…"
