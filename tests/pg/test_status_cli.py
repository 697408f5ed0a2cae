"""`switchyard status` on the postgres backend, run as a user runs it: depths, processes, owners, the
database; an unreachable database or an old schema said in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from gateway.backends.postgres import schema
from tests.pg.helpers import insert_message, insert_reply, payload, pg_home, switchyard


@pytest.fixture
def home(tmp_path: Path, pg_dsn: str) -> Path:
    schema.migrate(pg_dsn)
    return pg_home(tmp_path)


def _cluster(conn: psycopg.Connection) -> None:
    insert_message(conn, "q1.json", payload("q1"))
    insert_message(conn, "q2.json", payload("q2"))
    insert_message(conn, "r1.json", payload("r1"), state="running")
    insert_message(conn, "d1.json", payload("d1"), state="dead", reason="gave up", attempts=5)
    insert_reply(conn, "out1.json")
    insert_reply(conn, "out2.json", state="dead", reason="refused")
    conn.execute("INSERT INTO switchyard_processes (holder, role, host, pid, detail) VALUES "
                 "('alpha:11:1', 'run', 'alpha', 11, '{\"database\": \"reconnected 2 times\"}'), "
                 "('beta:22:1', 'worker', 'beta', 22, '{}')")
    conn.execute("INSERT INTO switchyard_processes (holder, role, host, pid, last_seen) VALUES "
                 "('gamma:33:1', 'worker', 'gamma', 33, now() - interval '10 minutes')")
    conn.execute("INSERT INTO switchyard_leases (name, holder, expires_at) VALUES "
                 "('channel:telegram/tg', 'alpha:11:1', now() + interval '15 seconds')")


def test_status_shows_depths_processes_owners_and_the_database(home: Path, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as conn:
        _cluster(conn)
    result = switchyard(home, pg_dsn, "status", "--json")
    assert result.returncode == 0, result.stderr  # live processes are attached
    status = json.loads(result.stdout)
    assert status["queue"] == {"queued": 2, "running": 1, "dead": 1, "replies_pending": 1, "replies_dead": 1}
    assert status["database"]["reachable"] and status["database"]["schema_current"]
    by_host = {p["host"]: p for p in status["processes"]}
    assert {h: (p["role"], p["pid"], p["stale"]) for h, p in by_host.items()} == {
        "alpha": ("run", 11, False), "beta": ("worker", 22, False), "gamma": ("worker", 33, True)}
    assert by_host["alpha"]["detail"] == {"database": "reconnected 2 times"}
    assert status["leases"][0] | {"expires_at": None, "acquired_at": None} == {
        "name": "channel:telegram/tg", "holder": "alpha:11:1", "expired": False, "expires_at": None,
        "acquired_at": None}
    assert {d["name"] for d in status["dead_letters"]} == {"d1.json", "out2.json"}

    text = switchyard(home, pg_dsn, "status")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert "gateway: 2 live process(es) attached to the database" in lines
    assert any("schema current" in line and line.startswith("database: ") for line in lines)
    assert any("gamma" in line and "STALE" in line for line in lines)
    assert any("alpha" in line and "reconnected 2 times" in line for line in lines)
    assert any("channel:telegram/tg" in line and "alpha:11:1" in line for line in lines)
    assert "dead letters: 2 (`switchyard dead list`)" in lines


def test_no_live_process_is_exit_3(home: Path, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as conn:
        conn.execute("INSERT INTO switchyard_processes (holder, role, host, pid, last_seen) VALUES "
                     "('gamma:33:1', 'worker', 'gamma', 33, now() - interval '10 minutes')")
    result = switchyard(home, pg_dsn, "status")
    assert result.returncode == 3
    assert "gateway: no live process attached to the database" in result.stdout


def test_a_schema_behind_names_the_missing_migration(home: Path, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as conn:
        conn.execute("DELETE FROM switchyard_migrations WHERE name = '0001_core.sql'")
    result = switchyard(home, pg_dsn, "status")
    assert "missing 0001_core.sql; run `switchyard db migrate`" in result.stdout, result.stderr
    assert "Traceback" not in result.stderr


def test_an_unreachable_database_is_one_line_without_traceback_or_password(tmp_path: Path) -> None:
    home = pg_home(tmp_path)
    dsn = "postgresql://someone:hunter2@127.0.0.1:1/none?connect_timeout=2"
    result = switchyard(home, dsn, "status")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "cannot use the database at" in result.stderr and "hunter2" not in result.stderr + result.stdout
    as_json = switchyard(home, dsn, "status", "--json")
    assert as_json.returncode == 2 and json.loads(as_json.stdout)["database"]["reachable"] is False


def test_status_on_the_file_backend_does_not_load_psycopg(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    code = ("import sys\nfrom gateway.cli import main\n"
            f"code = main(['--home', {str(home)!r}, 'status'])\n"
            "print('loaded', sorted(m for m in ('psycopg', 'procrastinate') if m in sys.modules),"
            " sorted(m for m in sys.modules if m.startswith('gateway.backends.postgres.')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    # the backend's registration (postgres/plugin.py) is all of its package that is loaded
    assert result.stdout.strip().splitlines()[-1] == "loaded [] ['gateway.backends.postgres.plugin']", result.stderr
