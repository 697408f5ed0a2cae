"""'Queued' receipts on the PostgreSQL backend: the file backend's gateway/runtime/receipts.py, from the database.

A message still `queued` `queue.receipt_after_sec` after it was taken in, with earlier messages of
one of its ordering keys queued or running (its position: the most of them over its keys, as the
file backend counts), gets one receipt. Each `run` process sends them for the channel profiles it
runs and that take receipts: only the owner of a profile knows its channel (a `switchyard worker`
has none), and it delivers the receipt anyway; a worker's own view would miss the messages waiting
behind a retry's backoff, which no one is processing. One query every POLL_S finds them all.

The receipt is inserted into switchyard_outbox in the transaction that locks the message row while
it is still `queued` and stamps `receipt_at`: the worker cannot start the message (its update to
`running` waits for that row) until the receipt is committed ahead of the answer, a message that
started or was answered is no longer selected, and a stamped one is never selected again, by any process.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from gateway.backends.postgres.outbox import PgOutbox
from gateway.models import IncomingPayload
from gateway.payloads import parse_payload, receipt_for, receipt_sent
from gateway.settings import QueueSettings
from gateway.telemetry.events import EventLog

log = logging.getLogger("switchyard.pg.receipts")

POLL_S = 1.0  # at most this late after receipt_after_sec (sooner when receipt_after_sec is short)
BATCH = 100

# Waiting messages of `profiles`, due, each with how many messages sharing a key come before it.
WAITING = """
SELECT m.id, m.payload, ahead.n
  FROM switchyard_messages m
 CROSS JOIN LATERAL (
       SELECT max((SELECT count(*) FROM switchyard_messages e
                    WHERE e.id < m.id AND e.state IN ('queued', 'running') AND e.keys @> ARRAY[k])) AS n
         FROM unnest(m.keys) AS k) ahead
 WHERE m.state = 'queued' AND m.receipt_at IS NULL AND m.profile = ANY(%s)
   AND m.enqueued_at <= now() - make_interval(secs => %s) AND ahead.n > 0
 ORDER BY m.id
 LIMIT %s
   FOR UPDATE OF m SKIP LOCKED
"""


class PgReceipts:
    """Sends the receipts of the messages of `profiles()` (the running channels that take receipts)."""

    def __init__(self, dsn: str, outbox: PgOutbox, events: EventLog, settings: QueueSettings,
                 *, profiles: Callable[[], list[str]]):
        self.dsn = dsn
        self.outbox = outbox
        self.events = events
        self.after_s = settings.receipt_after_sec
        self.max_payload_bytes = settings.max_payload_bytes
        self.profiles = profiles

    async def run(self) -> None:
        """Sends the due receipts every poll until cancelled; a database away is tried again next time."""
        if self.after_s <= 0:
            return  # receipts are off
        pause = min(POLL_S, max(0.05, self.after_s / 4))
        while True:
            profiles = self.profiles()
            if profiles:
                try:
                    sent = await asyncio.to_thread(self.send_due, profiles)
                except Exception as exc:  # a receipt is a courtesy; the messages are safe in the database
                    log.debug("cannot send receipts (retried at the next poll): %s", exc)
                else:
                    for message, ahead in sent:
                        receipt_sent(self.events, message, ahead)
            await asyncio.sleep(pause)

    def send_due(self, profiles: list[str]) -> list[tuple[IncomingPayload, int]]:
        """One transaction: the due receipts of `profiles` into the outbox, their messages stamped.
        Returns (message, ahead) of each receipt written."""
        sent: list[tuple[IncomingPayload, int]] = []
        with self.outbox.pool.connection() as conn, conn.transaction(), conn.cursor() as cursor:
            rows = cursor.execute(WAITING, (profiles, self.after_s, BATCH)).fetchall()
            for message_id, payload, ahead in rows:
                message = self._message(message_id, bytes(payload))
                if message is not None:
                    self.outbox.insert_sync(cursor, self.outbox.prepared(receipt_for(message, int(ahead))))
                    sent.append((message, int(ahead)))
            if rows:
                cursor.execute("UPDATE switchyard_messages SET receipt_at = now() WHERE id = ANY(%s)",
                               ([row[0] for row in rows],))
        return sent

    def _message(self, message_id: Any, payload: bytes) -> IncomingPayload | None:
        try:
            return parse_payload(payload, self.max_payload_bytes)
        except ValueError:  # a payload with keys parsed when it was taken in: not expected; no receipt
            log.debug("message %s: no receipt for a payload that does not parse", message_id)
            return None
