"""What the PostgreSQL backend holds for `switchyard status` (gateway/cli/backends.py words it): the database
(reachable, schema current), queue depths, the processes attached on every host, the owner of each channel
lease, dead letters.

Imported by gateway/backends/postgres/backend.py when the postgres backend is chosen.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg

from gateway.backends import StorageStatus
from gateway.backends.postgres import schema
from gateway.backends.postgres.deadletters import DeadStore
from gateway.home import Home
from gateway.settings import QueueSettings
from gateway.telemetry.redaction import redacted_dsn

CONNECT_TIMEOUT_S = 5
STALE_AFTER_LEASES = 2  # a process not seen for this many lease_sec is marked stale


# (part, count, seconds since the oldest entered its state) of each part of the queue
_DEPTHS = """
SELECT 'queued', count(*), extract(epoch FROM now() - min(enqueued_at))
  FROM switchyard_messages WHERE state = 'queued'
UNION ALL SELECT 'running', count(*), extract(epoch FROM now() - min(updated_at))
  FROM switchyard_messages WHERE state = 'running'
UNION ALL SELECT 'dead', count(*), extract(epoch FROM now() - min(updated_at))
  FROM switchyard_messages WHERE state = 'dead'
UNION ALL SELECT 'replies_pending', count(*), extract(epoch FROM now() - min(created_at))
  FROM switchyard_outbox WHERE state = 'pending'
UNION ALL SELECT 'replies_dead', count(*),
       extract(epoch FROM now() - min(coalesce(sent_at, next_attempt_at, created_at)))
  FROM switchyard_outbox WHERE state = 'dead'
"""


def iso(stamp: datetime | None) -> str | None:
    """A timestamp as `status` shows it (UTC, seconds, `Z`)."""
    return stamp.isoformat(timespec="seconds").replace("+00:00", "Z") if stamp else None


def gather(settings: QueueSettings, dsn: str, *, dead_shown: int, home: Home | None = None) -> StorageStatus:
    """The database's status (dead letters: with those quarantined in `home`'s failed/), on a connection of
    its own (a command: it fails within CONNECT_TIMEOUT_S); raises psycopg.Error. Without its core schema,
    the database alone."""
    with psycopg.connect(dsn, connect_timeout=CONNECT_TIMEOUT_S, autocommit=True) as conn:
        missing = schema.missing(conn)
        database: dict[str, Any] = {"dsn": redacted_dsn(dsn), "reachable": True, "schema_current": not missing,
                                    "missing_migrations": missing}
        if missing and "0001_core.sql" in missing:
            return StorageStatus(queue={}, dead_letter_count=0, dead_letters=[], database=database)
        return _tables(conn, settings, dead_shown, dsn, home, database)


def depths(conn: psycopg.Connection[Any]) -> dict[str, tuple[int, float | None]]:
    """(count, age in seconds of the oldest) of queued, running and dead messages, pending and dead replies."""
    return {part: (int(count), round(float(age), 1) if age is not None else None)
            for part, count, age in conn.execute(_DEPTHS)}


def processes(conn: psycopg.Connection[Any], settings: QueueSettings) -> list[dict[str, Any]]:
    """Every process attached to the database; `stale` when not seen for STALE_AFTER_LEASES leases."""
    stale_s = settings.lease_sec * STALE_AFTER_LEASES
    return [
        {"holder": holder, "role": role, "host": host, "pid": pid, "started_at": iso(started),
         "last_seen": iso(seen), "seen_ago_s": round(float(ago), 1), "stale": float(ago) > stale_s,
         "detail": detail or {}}
        for holder, role, host, pid, started, seen, ago, detail in conn.execute(
            "SELECT holder, role, host, pid, started_at, last_seen, "
            "extract(epoch FROM now() - last_seen), detail FROM switchyard_processes ORDER BY host, pid")]


def leases(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    """Every lease (`channel:<type>/<profile>`: the owner of a channel profile) and its holder."""
    return [
        {"name": name, "holder": holder, "expires_at": iso(expires), "expired": bool(expired),
         "acquired_at": iso(acquired)}
        for name, holder, expires, acquired, expired in conn.execute(
            "SELECT name, holder, expires_at, acquired_at, expires_at < now() FROM switchyard_leases ORDER BY name")]


def _tables(conn: psycopg.Connection[Any], settings: QueueSettings, dead_shown: int, dsn: str,
            home: Home | None, database: dict[str, Any]) -> StorageStatus:
    queue = {part: count for part, (count, _) in depths(conn).items()}
    store = DeadStore(dsn, home)
    dead = store.list_dead() if queue["dead"] or queue["replies_dead"] or store.has_local() else []
    return StorageStatus(queue=queue, dead_letter_count=len(dead), dead_letters=dead[:dead_shown],
                         database=database, processes=processes(conn, settings), leases=leases(conn))
