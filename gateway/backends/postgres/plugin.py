"""Declares the PostgreSQL backend (`queue.backend: postgres`) to the composition (gateway/composition.py).

It stands outside gateway/backends/postgres/ and imports nothing of it, nor psycopg: the factory imports
gateway/backends/postgres/backend.py when the backend is chosen, so the file backend never loads either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.hookspecs import hookimpl

if TYPE_CHECKING:
    from gateway.backends import BackendFactory
    from gateway.backends.postgres.backend import PostgresBackend
    from gateway.home import Home
    from gateway.settings import Settings
    from gateway.stores import StoreFactory, Stores


def _postgres(home: Home, settings: Settings, stores: Stores) -> PostgresBackend:
    from gateway.backends.postgres.backend import PostgresBackend

    return PostgresBackend(home, settings, stores)


@hookimpl
def switchyard_backends() -> dict[str, BackendFactory]:
    """Declares the postgres backend."""
    return {"postgres": _postgres}


@hookimpl
def switchyard_stores() -> dict[str, dict[str, StoreFactory]]:
    """Declares the postgres audit log (gateway.stores.AUDIT)."""
    return {"audit": {"postgres": _audit}}


def _audit(backend: PostgresBackend, *, command: bool = False) -> Any:
    from gateway.backends.postgres.audit import PgAuditLog

    return PgAuditLog.direct(backend.dsn) if command else PgAuditLog.pooled(backend.dsn, backend.pool)


@hookimpl
def switchyard_migrations() -> dict[str, list[str]]:
    """The gateway's tables: the queue, outbox, delivery journal, files, pairing, receipts, leases, events,
    tool approvals."""
    return {"postgres": ["gateway.backends.postgres"]}
