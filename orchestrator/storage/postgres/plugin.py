"""Declares the orchestrator's stores on the PostgreSQL backend (`switchyard_stores`): runs, provider
sessions, conversation history, schedules and usage totals in the database of gateway/backends/postgres/backend.py.
It stands outside
orchestrator/storage/postgres/ and imports nothing of it, nor psycopg: each factory imports its store when opened."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.hookspecs import hookimpl

if TYPE_CHECKING:
    from gateway.backends.postgres.backend import PostgresBackend
    from gateway.stores import StoreFactory


@hookimpl
def switchyard_migrations() -> dict[str, list[str]]:
    """The orchestrator's tables (runs, their events, cancel requests; sessions and history; schedules; usage), in
    orchestrator/storage/postgres/migrations/."""
    return {"postgres": ["orchestrator.storage.postgres"]}


@hookimpl
def switchyard_stores() -> dict[str, dict[str, StoreFactory]]:
    """Declares the postgres runs, sessions, history, schedules, usage and reminders."""
    return {"runs": {"postgres": _runs}, "sessions": {"postgres": _sessions}, "history": {"postgres": _history},
            "schedules": {"postgres": _schedules}, "usage": {"postgres": _usage},
            "reminders": {"postgres": _reminders}}


def _usage(backend: PostgresBackend, *, holder: str | None = None) -> Any:
    from orchestrator.storage.postgres.usage import PgUsageRecords

    return PgUsageRecords(backend.dsn, backend.pool, holder=holder)


def _schedules(backend: PostgresBackend) -> Any:
    from orchestrator.storage.postgres.schedules import PgScheduleRecords

    return PgScheduleRecords(backend.dsn, backend.pool)


def _reminders(backend: PostgresBackend) -> Any:
    from orchestrator.storage.postgres.reminders import PgReminders

    return PgReminders(backend.dsn, backend.pool)


def _runs(backend: PostgresBackend, *, fsync: bool) -> Any:
    from orchestrator.storage.postgres.runs import PgRunStore

    return PgRunStore(backend.home, backend.dsn, fsync=fsync, pool=backend.pool,
                      live_sec=backend.settings.queue.lease_sec)


def _sessions(backend: PostgresBackend) -> Any:
    from orchestrator.storage.postgres.sessions import PgSessionStore

    return PgSessionStore(backend.dsn, backend.pool)


def _history(backend: PostgresBackend) -> Any:
    from orchestrator.agents.sessions import ConversationHistory
    from orchestrator.storage.postgres.sessions import PgRecords

    return ConversationHistory(PgRecords(backend.dsn, "history", backend.pool))
