"""`switchyard db migrate|check` against a real PostgreSQL: a fresh schema, an up-to-date one, an old one."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from gateway.backends.postgres import schema
from tests.backends.postgres import helpers
from tests.backends.postgres.helpers import switchyard


@pytest.fixture
def pg_home(tmp_path: Path) -> Path:
    return helpers.pg_home(tmp_path)


def test_migrate_creates_every_table_and_check_then_passes(pg_home: Path, pg_dsn: str) -> None:
    refused = switchyard(pg_home, pg_dsn, "db", "check")
    assert refused.returncode == 2
    assert "switchyard db migrate" in refused.stderr

    first = switchyard(pg_home, pg_dsn, "db", "migrate")
    assert first.returncode == 0, first.stderr
    assert "0001_core.sql" in first.stdout

    with psycopg.connect(pg_dsn) as conn:
        tables = {row[0] for row in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()")}
    assert {"procrastinate_jobs", "switchyard_messages", "switchyard_outbox", "switchyard_leases",
            "switchyard_answered", "switchyard_processes", "switchyard_events"} <= tables

    again = switchyard(pg_home, pg_dsn, "db", "migrate")
    assert (again.returncode, again.stdout.strip()) == (0, "the schema is up to date")
    assert switchyard(pg_home, pg_dsn, "db", "check").returncode == 0


def test_a_database_missing_a_migration_is_refused_by_name(pg_dsn: str) -> None:
    schema.migrate(pg_dsn)
    with psycopg.connect(pg_dsn) as conn:
        conn.execute("DELETE FROM switchyard_migrations WHERE name = '0001_core.sql'")
    with pytest.raises(schema.SchemaOutdated, match=r"0001_core\.sql.*switchyard db migrate"):
        schema.check(pg_dsn)


def test_an_unset_dsn_variable_is_named(pg_home: Path) -> None:
    result = switchyard(pg_home, None, "db", "migrate")
    assert result.returncode == 2
    assert "SWITCHYARD_DSN is not set" in result.stderr


def test_an_unreachable_database_is_one_line_without_the_password(pg_home: Path) -> None:
    result = switchyard(pg_home, "postgresql://someone:hunter2@127.0.0.1:1/none?connect_timeout=2", "db", "check")
    assert result.returncode == 2
    assert "cannot use the database" in result.stderr
    assert "hunter2" not in result.stderr
    assert "Traceback" not in result.stderr


def test_switchyard_migrations_bring_the_orchestrators_own_tables(pg_dsn: str) -> None:
    """The orchestrator ships its tables' migrations beside its stores (orchestrator/storage/postgres/migrations/) and
    declares them; `migrate` applies them with the gateway's, in name order, under the same names as before."""
    assert sorted(schema.migration_packages()) == ["gateway.backends.postgres", "orchestrator.storage.postgres"]
    applied = schema.migrate(pg_dsn)
    assert applied.index("0030_files.sql") < applied.index("0040_runs.sql") < applied.index("0051_pairing.sql")
    with psycopg.connect(pg_dsn) as conn:
        tables = {row[0] for row in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()")}
    assert {"switchyard_runs", "switchyard_memory", "switchyard_locks"} <= tables


def test_switchyard_migrations_refuse_a_name_two_plugins_ship(pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two plugins shipping one migration name would apply only one of them: refused, naming it."""
    monkeypatch.setattr(schema, "migration_packages",
                        lambda: ["gateway.backends.postgres", "gateway.backends.postgres"])
    with pytest.raises(ValueError, match=r"two plugins ship the migration 0001_core\.sql"):
        schema.migrate(pg_dsn)


def test_the_queue_claims_migration_puts_back_what_an_earlier_version_was_running(pg_dsn: str) -> None:
    """A message an earlier version left 'running' (as a Procrastinate job, with no holder) would hold its
    conversation for ever under the queue claimed by SQL: migration 0100 puts it back in its place."""
    schema.migrate(pg_dsn)
    with psycopg.connect(pg_dsn) as conn:  # the database as the version before 0100 left it
        conn.execute("DROP INDEX switchyard_messages_open_idx")
        conn.execute("ALTER TABLE switchyard_messages DROP COLUMN holder, DROP COLUMN due_at")
        conn.execute("DELETE FROM switchyard_migrations WHERE name = '0100_queue_claims.sql'")
        for name, state in (("was-running", "running"), ("was-waiting", "queued"), ("was-done", "done")):
            conn.execute("INSERT INTO switchyard_messages (name, payload, channel, profile, conversation, keys, state) "
                         "VALUES (%s, '{}', 'console', 'console', 'c1', ARRAY['conv:console/console/c1'], %s)",
                         (name, state))
    assert schema.migrate(pg_dsn) == ["0100_queue_claims.sql"]
    with psycopg.connect(pg_dsn) as conn:
        states = dict(conn.execute("SELECT name, state FROM switchyard_messages WHERE name LIKE 'was-%'").fetchall())
    assert states == {"was-running": "queued", "was-waiting": "queued", "was-done": "done"}
