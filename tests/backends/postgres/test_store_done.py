"""A message's outcome stored in one statement (gateway.backends.postgres.outbox.store_done_statement, used by
MessageProcessor._store_done): replies, the answer and `done` together or not at all."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from gateway.backends.postgres import schema
from gateway.backends.postgres.outbox import PgOutbox
from gateway.home import Home
from gateway.models import IncomingPayload, OutgoingPayload
from gateway.telemetry.events import EventLog
from tests.backends.postgres.helpers import insert_message, payload


@pytest.fixture
def outbox(tmp_path: Path, pg_dsn: str) -> Iterator[PgOutbox]:
    schema.migrate(pg_dsn)
    home = Home(tmp_path / "home")
    home.create()
    events = EventLog(home.events_file)
    yield PgOutbox(home, events, dsn=pg_dsn)
    events.close()


def _replies(count: int) -> list[OutgoingPayload]:
    message = IncomingPayload.model_validate_json(payload("m1"))
    return [OutgoingPayload.reply_to(message, f"part {i}", agent="a", timestamp=1) for i in range(count)]


def _state(conn: psycopg.Connection[Any]) -> tuple[Any, ...]:
    row = conn.execute("SELECT (SELECT state FROM switchyard_messages), (SELECT count(*) FROM switchyard_answered), "
                       "(SELECT array_agg(payload->>'message' ORDER BY id) FROM switchyard_outbox)").fetchone()
    assert row is not None
    return tuple(row)


def test_done_the_answer_and_the_replies_in_order_in_one_statement(outbox: PgOutbox, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        message_id = insert_message(conn, "m1.json", payload("m1"), state="running")
        statement = outbox.store_done_statement(message_id, "identity-1", outbox_ready(outbox, 3))
        assert statement is not None
        assert conn.execute(*statement).fetchone() == (1,)
        assert _state(conn) == ("done", 1, ["part 0", "part 1", "part 2"])


def test_a_message_already_done_gets_no_second_answer(outbox: PgOutbox, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        message_id = insert_message(conn, "m1.json", payload("m1"), state="done")
        statement = outbox.store_done_statement(message_id, "identity-1", outbox_ready(outbox, 1))
        assert statement is not None
        assert conn.execute(*statement).fetchone() == (0,)
        assert _state(conn) == ("done", 0, None)


def test_a_taken_reply_name_stores_nothing(outbox: PgOutbox, pg_dsn: str) -> None:
    """The caller then falls back to the transaction that picks the next name."""
    replies = outbox_ready(outbox, 2)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        message_id = insert_message(conn, "m1.json", payload("m1"), state="running")
        statement = outbox.store_done_statement(message_id, "identity-1", replies)
        assert statement is not None
        conn.execute("INSERT INTO switchyard_outbox (name, channel, profile, conversation, payload) "
                     "VALUES (%s, 'console', 'console', 'c1', '{\"message\": \"taken\"}')", (statement[1][-5],))
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute(*statement)
        assert _state(conn) == ("running", 0, ["taken"])


def test_a_replacing_channel_is_left_to_the_transaction(outbox: PgOutbox) -> None:
    outbox.named_by_message_id = {"console"}
    assert outbox.store_done_statement(1, "identity-1", outbox_ready(outbox, 1)) is None


def outbox_ready(outbox: PgOutbox, count: int) -> list[OutgoingPayload]:
    return [outbox.prepared(reply) for reply in _replies(count)]


def test_a_written_reply_is_a_row_named_as_a_file_would_be_with_refused_attachments_named_in_its_text(
        outbox: PgOutbox, pg_dsn: str, tmp_path: Path) -> None:
    """The checks every outbox makes (gateway.outbox.BaseOutbox): an attachment outside the allowed roots
    is dropped and named; `write` returns the row's name, never a path to a file that does not exist."""
    outside = tmp_path / "secret.txt"
    outside.write_text("no")
    [reply] = _replies(1)
    reply.files = [str(outside)]
    name = outbox.write(reply)
    assert isinstance(name, str) and not (outbox.home.outgoing / name).exists()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        [(stored,)] = conn.execute("SELECT payload FROM switchyard_outbox WHERE name = %s", (name,)).fetchall()
    assert stored["files"] == [] and stored["message"].count("[file not sent:") == 1
    second = outbox.write(_replies(1)[0])  # the same message and timestamp: the next name, not the same row
    assert second != name
