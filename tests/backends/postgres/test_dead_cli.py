"""`switchyard dead list|show|retry|drop` on the postgres backend, through the command as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from gateway.backends.postgres import schema
from tests.backends.postgres.helpers import insert_message, insert_reply, payload, pg_home, switchyard


@pytest.fixture
def home(tmp_path: Path, pg_dsn: str) -> Path:
    schema.migrate(pg_dsn)
    return pg_home(tmp_path)


def test_dead_messages_and_replies_are_listed_and_shown_with_their_original_bytes(home: Path, pg_dsn: str) -> None:
    raw = payload("m1") + b"  "  # the exact bytes, trailing spaces and all
    with psycopg.connect(pg_dsn) as conn:
        insert_message(conn, "m1.json", raw, state="dead", reason="handler failed: boom", attempts=5)
        insert_message(conn, "alive.json", payload("m2"))
        insert_reply(conn, "r1.json", state="dead", reason="channel refused", attempts=3)

    listed = switchyard(home, pg_dsn, "dead", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    by_name = {letter["name"]: letter for letter in json.loads(listed.stdout)}
    assert set(by_name) == {"m1.json", "r1.json"}
    assert (by_name["m1.json"]["kind"], by_name["m1.json"]["attempts"]) == ("message", 5)
    assert by_name["m1.json"]["reason"] == "handler failed: boom"
    assert (by_name["r1.json"]["kind"], by_name["r1.json"]["reason"]) == ("reply", "channel refused")

    table = switchyard(home, pg_dsn, "dead", "list")
    assert "m1.json" in table.stdout and "handler failed: boom" in table.stdout

    shown = switchyard(home, pg_dsn, "dead", "show", "m1.json", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["payload"] == json.loads(raw)
    assert switchyard(home, pg_dsn, "dead", "show", "alive.json").returncode == 1  # not dead


def test_retry_queues_a_message_again_with_fresh_attempts_in_its_place(home: Path, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as conn:
        insert_message(conn, "m1.json", payload("m1"), state="dead", reason="x", attempts=5,
                                  keys=("run:r-1", "conv:console/console/c1"))
        insert_reply(conn, "r1.json", state="dead", reason="y", attempts=4)

    result = switchyard(home, pg_dsn, "dead", "retry", "m1.json", "r1.json")
    assert result.returncode == 0, result.stderr
    assert "retried m1.json → queue" in result.stdout and "retried r1.json → outbox" in result.stdout

    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT state, attempts, errors, holder, due_at <= now() FROM switchyard_messages "
                            "WHERE name = 'm1.json'").fetchone() == ("queued", 0, [], None, True)
        state, attempts, due_now = conn.execute(
            "SELECT state, attempts, next_attempt_at <= now() FROM switchyard_outbox WHERE name = 'r1.json'").fetchone()
    assert (state, attempts, due_now) == ("pending", 0, True)
    assert switchyard(home, pg_dsn, "dead", "list").stdout.strip() == "no dead letters"


def test_an_unknown_name_changes_nothing_and_exits_1(home: Path, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as conn:
        insert_message(conn, "m1.json", payload("m1"), state="dead", reason="x")
    result = switchyard(home, pg_dsn, "dead", "retry", "m1.json", "ghost.json")
    assert result.returncode == 1 and "ghost.json" in result.stderr
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT state FROM switchyard_messages").fetchone() == ("dead",)


def test_retry_all_and_drop(home: Path, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as conn:
        insert_message(conn, "a.json", payload("a"), state="dead", reason="x")
        insert_message(conn, "b.json", payload("b"), state="dead", reason="x")
        insert_reply(conn, "r.json", state="dead", reason="y")
    dropped = switchyard(home, pg_dsn, "dead", "drop", "a.json")
    assert dropped.stdout.strip() == "dropped a.json"
    again = switchyard(home, pg_dsn, "dead", "retry", "--all")
    assert again.returncode == 0
    assert sorted(again.stdout.split("\n")[:-1]) == ["retried b.json → queue", "retried r.json → outbox"]
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT name, state FROM switchyard_messages").fetchall() == [("b.json", "queued")]
    assert switchyard(home, pg_dsn, "dead", "retry").returncode == 2  # neither names nor --all


def test_an_unreachable_database_is_one_line_and_exit_2(tmp_path: Path) -> None:
    home = pg_home(tmp_path)
    result = switchyard(home, "postgresql://someone:hunter2@127.0.0.1:1/none?connect_timeout=2", "dead", "list")
    assert result.returncode == 2
    assert "cannot use the database" in result.stderr and "hunter2" not in result.stderr
    assert "Traceback" not in result.stderr


def test_send_wait_takes_no_reply_stored_before_its_message(tmp_path: Path, pg_dsn: str) -> None:
    """On postgres a reply never reaches outgoing/: `send --wait` reads switchyard_outbox, and only a reply
    stored after its message was taken in is its reply (one before answered another message with that id;
    the reply read from the database through a running gateway is in tests/e2e/test_lifecycle.py)."""
    schema.migrate(pg_dsn)
    home = pg_home(tmp_path)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        insert_reply(conn, "m-waited")  # its payload answers messageId m-waited
    result = switchyard(home, pg_dsn, "send", "hello", "--message-id", "m-waited", "--wait", "0.5")
    assert (result.returncode, result.stdout) == (1, ""), result.stderr
    assert "no reply within" in result.stderr


def test_send_wait_with_the_database_away_is_one_line_exit_2_and_the_message_stays_queued(tmp_path: Path) -> None:
    home = pg_home(tmp_path)
    dsn = "postgresql://someone:hunter2@127.0.0.1:1/none?connect_timeout=2"
    result = switchyard(home, dsn, "send", "hello", "--message-id", "m-away", "--wait", "5")
    assert result.returncode == 2 and "Traceback" not in result.stderr and "hunter2" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("switchyard: cannot use the database")
    assert "the message is still queued" in result.stderr
    assert [path.name for path in (home / "queue" / "incoming").glob("*.json")], "the message was not kept"
