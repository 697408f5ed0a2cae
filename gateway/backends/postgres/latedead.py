"""Late dead letters on the PostgreSQL backend: a message answered with an ack whose run later failed
permanently becomes a dead message all the same (gateway.api.LateDeadLetter), which `dead list` shows and
`dead retry` queues again (gateway/backends/postgres/deadletters.py).

Its row, done since the ack, keeps the original bytes: it turns dead with the reason and every error,
and its identity leaves `switchyard_answered` in the same transaction, so the retried message is run,
not skipped as a duplicate. A row retention already deleted is replaced by a dead row holding the
message as the run kept it (its reason says so). The row is never waited for: one whose answer is
still being stored (running, or locked by that transaction) is left for a later call.
"""

from __future__ import annotations

import json
from typing import Any

from psycopg.errors import LockNotAvailable

from gateway.backends.postgres import answered
from gateway.backends.postgres.db import SharedPool
from gateway.backends.postgres.queue import KEPT_ERRORS
from gateway.models import IncomingPayload
from gateway.payloads import letter_name, message_identity, ordering_keys
from gateway.storable import made_safe

_CANDIDATES = ("SELECT id, payload FROM switchyard_messages WHERE channel = %s AND profile = %s "
               "AND conversation = %s AND position(convert_to(%s, 'UTF8') in payload) > 0 ORDER BY id")
_INSERT = ("INSERT INTO switchyard_messages (name, payload, channel, profile, conversation, keys, state, "
           "attempts, errors, reason) VALUES (%s, %s, %s, %s, %s, %s, 'dead', 1, %s::jsonb, %s) "
           "ON CONFLICT (name) DO NOTHING")


class PgLateDeadLetters:
    """Turns answered messages' rows dead and forgets their answer (`bury`), through a sync pool."""

    def __init__(self, dsn: str, pool: SharedPool | None = None):
        self.dsn = dsn
        self.pool = pool or SharedPool(dsn)  # its backend's; its own when built alone (tests)

    def bury(self, message: IncomingPayload, reason: str, errors: list[str]) -> str | None:
        """gateway.api.LateDeadLetter: the dead row's name; None while its answer is being stored."""
        reason, errors = made_safe(reason), made_safe(errors)
        identity = message_identity(message)
        with self.pool.connection() as conn, conn.transaction():
            row_id = _row_of(conn, message)
            if row_id is None:
                name = letter_name(message)
                conn.execute(_INSERT, (name, message.to_json(), message.channel, message.profile,
                                       message.conversation, list(ordering_keys(message)),
                                       json.dumps(errors[-KEPT_ERRORS:]),
                                       f"{reason} (the message as its run kept it: the original was pruned)"))
            else:
                try:
                    with conn.transaction():  # a savepoint: a row locked by the ack's transaction is not waited for
                        found = conn.execute("SELECT name, state, attempts, errors FROM switchyard_messages "
                                             "WHERE id = %s FOR UPDATE NOWAIT", (row_id,)).fetchone()
                except LockNotAvailable:
                    return None
                name, state, attempts, kept = found
                if state not in ("done", "dead"):
                    return None
                if state == "done":
                    conn.execute("UPDATE switchyard_messages SET state = 'dead', reason = %s, attempts = %s, "
                                 "errors = %s::jsonb, updated_at = now() WHERE id = %s",
                                 (reason, attempts + 1, json.dumps([*kept, *errors][-KEPT_ERRORS:]), row_id))
            conn.execute(answered.FORGET, (identity,))
        return str(name)


def _row_of(conn: Any, message: IncomingPayload) -> int | None:
    """The id of the message's row (the first taken in, if the platform delivered it twice), else None."""
    quoted = json.dumps(message.messageId, ensure_ascii=False)[1:-1]  # as the intake's JSON spells it
    for row_id, payload in conn.execute(_CANDIDATES, (message.channel, message.profile, message.conversation,
                                                      quoted)):
        try:
            stored = json.loads(bytes(payload))
        except (ValueError, RecursionError):
            continue
        if isinstance(stored, dict) and str(stored.get("messageId")) == message.messageId \
                and (stored.get("channelProfileId") or stored.get("channel")) == message.profile:
            return int(row_id)
    return None
