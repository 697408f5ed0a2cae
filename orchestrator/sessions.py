"""CLI sessions per conversation or run, and each conversation's recent exchanges, kept in the home.

A provider preset continues the CLI session of its scope (`conv:<channel>/<profile>/<conversation>` or
`run:<runId>`): the map from (provider, scope) to the CLI's session id lives in `<home>/sessions/`, one
small JSON file each, so it survives restarts. Calls sharing a session run one at a time.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from gateway.events import utc_now_iso
from gateway.home import Home, atomic_write
from orchestrator.clis import Session

SESSION_NAMESPACE = uuid.UUID("6f1d2a34-3a5c-4b8e-9a51-5d0c2b7e9f10")
MAX_TURNS = 20
HISTORY_EXCHANGES = 6
HISTORY_BYTES = 4096
HISTORY_TEXT_CHARS = 600


def _file_name(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:32] + ".json"


def _read(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_bytes())
    except (FileNotFoundError, ValueError):
        return None
    return value if isinstance(value, dict) else None


class SessionStore:
    """Which CLI session each (provider, scope) continues; ids for CLIs that take one are uuid5 of the
    scope and a generation that grows when the CLI forgot the session."""

    def __init__(self, home: Home):
        self.folder = home.root / "sessions"
        self._locks: dict[str, asyncio.Lock] = {}

    @asynccontextmanager
    async def hold(self, provider: str, scope: str) -> AsyncIterator[None]:
        """Runs the calls of one session one at a time."""
        lock = self._locks.setdefault(_file_name(provider, scope), asyncio.Lock())
        async with lock:
            yield

    def session(self, provider: str, scope: str, *, assigns_ids: bool) -> Session:
        """The session to continue, or a new one (with our own id when the CLI accepts one)."""
        record = _read(self._path(provider, scope)) or {}
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
        path = self._path(provider, scope)
        record = _read(path) or {"provider": provider, "scope": scope, "createdAt": utc_now_iso()}
        record.update(started=True, updatedAt=utc_now_iso())
        if session_id:
            record["sessionId"] = session_id
        if turn is not None:
            record["turns"] = [*record.get("turns", []), turn][-MAX_TURNS:]
        self._write(path, record)

    def forget(self, provider: str, scope: str, *, assigns_ids: bool) -> Session:
        """Drops a session the CLI no longer knows; returns the fresh one to start instead."""
        path = self._path(provider, scope)
        record = _read(path) or {"provider": provider, "scope": scope, "createdAt": utc_now_iso()}
        record["generation"] = int(record.get("generation", 0)) + 1
        record.pop("sessionId", None)
        record["started"] = False
        self._write(path, record)
        return self.session(provider, scope, assigns_ids=assigns_ids)

    def _path(self, provider: str, scope: str) -> Path:
        return self.folder / _file_name(provider, scope)

    def _write(self, path: Path, record: dict[str, Any]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(record, ensure_ascii=False).encode())


class ConversationHistory:
    """The last few exchanges of each conversation, so a stateless selector understands follow-ups."""

    def __init__(self, home: Home):
        self.folder = home.root / "sessions" / "history"

    def recent(self, scope: str) -> list[dict[str, str]]:
        """The latest exchanges (oldest first), capped to HISTORY_BYTES in all."""
        record = _read(self.folder / _file_name(scope)) or {}
        kept: list[dict[str, str]] = []
        size = 0
        for exchange in reversed(record.get("exchanges", [])):
            size += len(json.dumps(exchange, ensure_ascii=False).encode())
            if size > HISTORY_BYTES:
                break
            kept.append(exchange)
        return kept[::-1]

    def add(self, scope: str, user: str, answer: str) -> None:
        """Appends one exchange, keeping the last HISTORY_EXCHANGES."""
        path = self.folder / _file_name(scope)
        record = _read(path) or {"scope": scope}
        exchange = {"user": _clip(user), "assistant": _clip(answer)}
        record["exchanges"] = [*record.get("exchanges", []), exchange][-HISTORY_EXCHANGES:]
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(record, ensure_ascii=False).encode(), fsync=False)


def _clip(text: str) -> str:
    return text if len(text) <= HISTORY_TEXT_CHARS else text[:HISTORY_TEXT_CHARS] + "…"
