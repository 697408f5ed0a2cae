"""What `switchyard status` shows of the PostgreSQL backend: the database (reachable, schema current),
queue depths, the processes attached on every host, the owner of each channel lease, dead letters.

Imported by gateway/backends/postgres/storage.py when the postgres backend is chosen.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg

from gateway.backends.postgres import schema
from gateway.backends.postgres.deadletters import DeadStore
from gateway.cli.tables import print_table
from gateway.home import Home
from gateway.settings import QueueSettings
from gateway.stores import BackendUnreachable
from gateway.telemetry.redaction import database_error, redacted_dsn

CONNECT_TIMEOUT_S = 5
STALE_AFTER_LEASES = 2  # a process not seen for this many lease_sec is marked stale


class DatabaseUnreachable(BackendUnreachable):
    """The database cannot be used; the message is one line without the password."""


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


def gather(settings: QueueSettings, dsn: str, *, dead_shown: int, home: Home | None = None) -> dict[str, Any]:
    """The database's part of the status (dead letters: with those quarantined in `home`'s failed/), on a
    connection of its own (a command: it fails within CONNECT_TIMEOUT_S); raises DatabaseUnreachable."""
    shown = redacted_dsn(dsn)
    try:
        with psycopg.connect(dsn, connect_timeout=CONNECT_TIMEOUT_S, autocommit=True) as conn:
            missing = schema.missing(conn)
            database: dict[str, Any] = {"dsn": shown, "reachable": True, "schema_current": not missing,
                                        "missing_migrations": missing}
            if missing and "0001_core.sql" in missing:
                return {"database": database}
            return {"database": database, **_tables(conn, settings, dead_shown, dsn, home)}
    except psycopg.Error as exc:
        raise DatabaseUnreachable(database_error(exc, dsn)) from None


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
            home: Home | None) -> dict[str, Any]:
    queue = {part: count for part, (count, _) in depths(conn).items()}
    store = DeadStore(dsn, home)
    dead = store.list_dead() if queue["dead"] or queue["replies_dead"] or store.has_local() else []
    return {"queue": queue, "processes": processes(conn, settings), "leases": leases(conn),
            "dead_letter_count": len(dead),
            "dead_letters": [letter.to_json() | {"file": letter.name} for letter in dead[:dead_shown]]}


def print_database(status: dict[str, Any]) -> None:
    """Prints the database, the processes attached and the channel owners, for a person."""
    database = status["database"]
    if database.get("schema_current"):
        print(f"database: {database['dsn']} (schema current)")
    else:
        absent = database["missing_migrations"]
        shown = ", ".join(absent[:3]) + (f" and {len(absent) - 3} more" if len(absent) > 3 else "")
        print(f"database: {database['dsn']} (schema behind: missing {shown}; run `switchyard db migrate`)")
    processes = status.get("processes") or []
    if processes:
        print()
        print_table(["role", "host", "pid", "last seen", "state", "detail"],
                    [[p["role"], p["host"], str(p["pid"]), f"{p['last_seen']} ({p['seen_ago_s']:g} s ago)",
                      "STALE" if p["stale"] else "ok", _detail(p["detail"])] for p in processes],
                    title="processes")
    else:
        print("\nprocesses: none attached")
    leases = status.get("leases") or []
    if leases:
        print()
        print_table(["lease", "owner", "until"],
                    [[lease["name"], lease["holder"], f"{lease['expires_at']}{' EXPIRED' if lease['expired'] else ''}"]
                     for lease in leases], title="channel owners")


def _detail(detail: dict[str, Any]) -> str:
    return ", ".join(f"{key}: {value}" for key, value in detail.items()) or "-"
