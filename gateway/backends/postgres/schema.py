"""Creates, migrates and checks the database schema: Procrastinate's tables, then Switchyard's.

Each migration is a file applied once, in name order, and recorded in `switchyard_migrations`:
Procrastinate's own (recorded as `procrastinate/<file>`; a new database gets its whole schema at
once and records every migration it ships as applied) and the plugins' (`switchyard_migrations`: the
gateway's in gateway/backends/postgres/migrations/, the orchestrator's in
orchestrator/storage/postgres/migrations/), in name order. A
process refuses to start on a database that misses one (`SchemaOutdated`); `switchyard db
migrate` applies them, under an advisory lock, so two hosts migrating at once do not collide.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import psycopg

MIGRATE_LOCK = 0x5357_4D49  # pg_advisory_xact_lock key for migrations ("SWMI")


class SchemaOutdated(Exception):
    """The database lacks migrations this version of Switchyard needs."""


def migration_packages() -> list[str]:
    """The packages whose `migrations/` the plugins declare for postgres (the built-in backend modules,
    `$SWITCHYARD_PLUGINS` and the entry points)."""
    from gateway.composition import BACKEND_PLUGINS
    from gateway.plugin_manager import call_each, plugin_manager_for

    declared = call_each(plugin_manager_for(BACKEND_PLUGINS), "switchyard_migrations")
    return list(dict.fromkeys(package for by_backend in declared for package in by_backend.get("postgres", [])))


def _ours() -> dict[str, str]:
    """Every declared migration by name; a name two packages ship is refused (it would apply once)."""
    found: dict[str, str] = {}
    for package in migration_packages():
        for entry in sorted((resources.files(package) / "migrations").iterdir(), key=lambda e: e.name):
            if entry.name.endswith(".sql"):
                if entry.name in found:
                    raise ValueError(f"two plugins ship the migration {entry.name} (in {package})")
                found[entry.name] = entry.read_text()
    return found


def _procrastinate() -> tuple[str, dict[str, str]]:
    from procrastinate.schema import SchemaManager

    folder = Path(SchemaManager.get_migrations_path())
    files = {f"procrastinate/{p.name}": p.read_text() for p in folder.glob("*.sql")}
    return SchemaManager.get_schema(), files


def _applied(conn: psycopg.Connection) -> set[str] | None:
    """The migrations recorded as applied; None when the database has no Switchyard schema at all."""
    exists = conn.execute("SELECT to_regclass('switchyard_migrations') IS NOT NULL").fetchone()
    if not exists or not exists[0]:
        return None
    return {row[0] for row in conn.execute("SELECT name FROM switchyard_migrations")}


def missing(conn: psycopg.Connection) -> list[str]:
    """The migrations not yet applied (all of them on an empty database), in the order they apply."""
    applied = _applied(conn) or set()
    _, procrastinate = _procrastinate()
    wanted = [*sorted(procrastinate), *sorted(_ours())]
    return [name for name in wanted if name not in applied]


def migrate(dsn: str) -> list[str]:
    """Applies every missing migration in one transaction; returns their names (none: up to date)."""
    with psycopg.connect(dsn) as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATE_LOCK,))
        applied = _applied(conn)
        schema, procrastinate = _procrastinate()
        done: list[str] = []
        if applied is None:
            conn.execute("CREATE TABLE switchyard_migrations ("
                         "name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())")
            fresh = conn.execute("SELECT to_regclass('procrastinate_jobs') IS NULL").fetchone()
            if fresh and fresh[0]:
                conn.execute(schema.encode())  # already at the newest: its migrations count as applied
                _record(conn, sorted(procrastinate))
                done.append("procrastinate schema")
            applied = _applied(conn) or set()
        for name in sorted(procrastinate):
            if name not in applied:
                conn.execute(procrastinate[name].encode())
                _record(conn, [name])
                done.append(name)
        for name, sql in sorted(_ours().items()):
            if name not in applied:
                conn.execute(sql.encode())
                _record(conn, [name])
                done.append(name)
        return done


def _record(conn: psycopg.Connection, names: list[str]) -> None:
    with conn.cursor() as cursor:
        cursor.executemany("INSERT INTO switchyard_migrations (name) VALUES (%s)", [(name,) for name in names])


def check(dsn: str) -> None:
    """Raises SchemaOutdated, naming what is missing and the command that applies it."""
    with psycopg.connect(dsn) as conn:
        absent = missing(conn)
    if absent:
        shown = ", ".join(absent[:3]) + (f" and {len(absent) - 3} more" if len(absent) > 3 else "")
        raise SchemaOutdated(f"the database schema is older than this Switchyard (missing {shown}); "
                             f"run `switchyard db migrate`")
