"""Declares the orchestrator's stores on the PostgreSQL backend (`switchyard_stores`): runs, provider
sessions, conversation history, schedules and usage totals in the database of gateway/pg/storage.py. It stands outside
orchestrator/pg/ and imports nothing of it, nor psycopg: each factory imports its store when opened."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.hookspecs import hookimpl

if TYPE_CHECKING:
    from gateway.pg.storage import PgStorage
    from gateway.stores import StoreFactory


@hookimpl
def switchyard_migrations() -> dict[str, list[str]]:
    """The orchestrator's tables (runs, their events, cancel requests; sessions and history; schedules; usage), in
    orchestrator/pg/migrations/."""
    return {"postgres": ["orchestrator.pg"]}


@hookimpl
def switchyard_stores() -> dict[str, dict[str, StoreFactory]]:
    """Declares the postgres runs, sessions, history, schedules and usage."""
    return {"runs": {"postgres": _runs}, "sessions": {"postgres": _sessions}, "history": {"postgres": _history},
            "schedules": {"postgres": _schedules}, "usage": {"postgres": _usage}}


def _usage(backend: PgStorage) -> Any:
    from orchestrator.pg.usage import PgUsageRecords

    return PgUsageRecords(backend.dsn, backend.pool)


def _schedules(backend: PgStorage) -> Any:
    from orchestrator.pg.schedules import PgScheduleRecords

    return PgScheduleRecords(backend.dsn, backend.pool)


def _runs(backend: PgStorage, *, fsync: bool) -> Any:
    from orchestrator.pg.runs import PgRunStore

    return PgRunStore(backend.home, backend.dsn, fsync=fsync, pool=backend.pool,
                      live_sec=backend.settings.queue.lease_sec)


def _sessions(backend: PgStorage) -> Any:
    from orchestrator.pg.sessions import PgSessionStore

    return PgSessionStore(backend.dsn, backend.pool)


def _history(backend: PgStorage) -> Any:
    from orchestrator.pg.sessions import PgRecords
    from orchestrator.sessions import ConversationHistory

    return ConversationHistory(PgRecords(backend.dsn, "history", backend.pool))
