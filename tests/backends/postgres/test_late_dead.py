"""A message answered with an ack whose run then failed permanently becomes a dead message all the same
(gateway.backends.postgres.latedead): its own row with its original bytes, its answer forgotten, never waited for."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from gateway.backends.postgres.latedead import PgLateDeadLetters
from gateway.models import IncomingPayload
from gateway.payloads import letter_name, message_identity
from tests.backends.postgres.helpers import insert_message, payload

REASON = "run r-1: step Finish: mine: `late-agent` was not found"


def _message(message_id: str) -> IncomingPayload:
    return IncomingPayload.model_validate_json(payload(message_id))


def _row(conn: psycopg.Connection[Any], name: str) -> tuple[Any, ...]:
    row = conn.execute("SELECT state, reason, attempts, errors, payload FROM switchyard_messages WHERE name = %s",
                       (name,)).fetchone()
    assert row is not None
    return tuple(row)


def _answered(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT count(*) FROM switchyard_answered").fetchone()
    assert row is not None
    return int(row[0])


def test_the_done_row_turns_dead_with_its_bytes_and_its_answer_is_forgotten(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        insert_message(conn, "other.json", payload("m0"), state="done")  # same conversation, another message
        insert_message(conn, "m1.json", payload("m1"), state="done")
        conn.execute("INSERT INTO switchyard_answered (identity) VALUES (%s)", (message_identity(_message("m1")),))
        late = PgLateDeadLetters(db)
        assert late.bury(_message("m1"), REASON, [REASON]) == "m1.json"
        assert _row(conn, "m1.json") == ("dead", REASON, 1, [REASON], payload("m1"))
        assert _row(conn, "other.json")[0] == "done"
        assert _answered(conn) == 0
        assert late.bury(_message("m1"), REASON, [REASON]) == "m1.json"  # again (a restart): the same letter
        assert _row(conn, "m1.json")[2] == 1


@pytest.mark.parametrize("state", ["queued", "running"])
def test_a_message_not_finished_is_left_for_later(db: str, state: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        insert_message(conn, "m1.json", payload("m1"), state=state)
        assert PgLateDeadLetters(db).bury(_message("m1"), REASON, [REASON]) is None
        assert _row(conn, "m1.json")[0] == state


def test_a_row_locked_by_the_transaction_storing_its_ack_is_not_waited_for(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn, psycopg.connect(db) as holder:
        insert_message(conn, "m1.json", payload("m1"), state="done")
        holder.execute("SELECT 1 FROM switchyard_messages WHERE name = 'm1.json' FOR UPDATE")  # held, open
        assert PgLateDeadLetters(db).bury(_message("m1"), REASON, [REASON]) is None
        holder.rollback()
        assert PgLateDeadLetters(db).bury(_message("m1"), REASON, [REASON]) == "m1.json"


def test_a_row_retention_deleted_is_replaced_by_the_runs_copy(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        message = _message("m9")
        name = PgLateDeadLetters(db).bury(message, REASON, [REASON])
        assert name == letter_name(message)
        state, reason, attempts, errors, data = _row(conn, name)
        assert (state, attempts, errors) == ("dead", 1, [REASON])
        assert reason.startswith(REASON) and "as its run kept it" in reason
        assert IncomingPayload.model_validate_json(bytes(data)) == message


def test_two_pruned_messages_whose_ids_make_the_same_name_are_both_dead(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        first, second = _message("chat:1"), _message("chat/1")
        names = {PgLateDeadLetters(db).bury(message, REASON, [REASON]) for message in (first, second)}
        assert len(names) == 2
        kept = {IncomingPayload.model_validate_json(bytes(_row(conn, str(name))[4])).messageId for name in names}
        assert kept == {"chat:1", "chat/1"}
