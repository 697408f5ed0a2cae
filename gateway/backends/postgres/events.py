"""The shared event log on the PostgreSQL backend: every event this process emits, also inserted into
`switchyard_events` with the process holder, so `status`, the dashboard and a person can see what
every host did in one place (logs/events.jsonl stays each host's own copy).

The observer only appends to a bounded buffer (never a round trip on the caller's path); a thread
inserts what is buffered every FLUSH_S or BATCH events, in one statement batch. While the database
is down the buffer keeps the newest MAX_BUFFERED events and counts what it had to drop; once the
database is back it inserts them, preceded by one `events.dropped` event with the count.
"""

from __future__ import annotations

import collections
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg

from gateway.backends.postgres.errors import database_away
from gateway.disk.locks import process_instance
from gateway.telemetry.events import EventLog, utc_now_iso
from gateway.telemetry.redaction import database_error

log = logging.getLogger("switchyard.pg.events")

FLUSH_S = 0.25
BATCH = 100
MAX_BUFFERED = 10_000
RETRY_MAX_S = 30.0
CLOSE_WAIT_S = 5.0
_INSERT = "INSERT INTO switchyard_events (at, holder, event) VALUES (%s::timestamptz, %s, %s::jsonb)"

Connect = Callable[[], "psycopg.Connection[Any]"]


class EventSink:
    """Buffers events and inserts them from a background thread (see the module docstring)."""

    def __init__(self, dsn: str, *, redact: Callable[[str], str] = lambda text: text,
                 max_buffered: int = MAX_BUFFERED, connect: Connect | None = None):
        self._dsn = dsn
        self._redact = redact
        self._connect: Connect = connect or (lambda: psycopg.connect(dsn, autocommit=True, connect_timeout=5))
        self._buffer: collections.deque[tuple[str, str]] = collections.deque()
        self._max = max_buffered
        self._cond = threading.Condition()
        self._stopping = False
        self.dropped = 0  # events dropped since the last `events.dropped` was stored
        self.dropped_total = 0
        self.stored = 0
        self.refused = 0  # events the database refused (each batch holding one is left out)
        self._down_since: str | None = None
        self._holder = process_instance()
        self._thread = threading.Thread(target=self._run, name="switchyard-pg-events", daemon=True)
        self._thread.start()

    def observe(self, record: dict[str, Any]) -> None:
        """The EventLog observer: buffers the (redacted) event; never blocks on or fails for the database."""
        text = self._redact(json.dumps(record, default=str, ensure_ascii=False))
        with self._cond:
            if len(self._buffer) >= self._max:
                self._buffer.popleft()
                self.dropped += 1
                self.dropped_total += 1
            self._buffer.append((str(record.get("ts") or utc_now_iso()), text))
            if len(self._buffer) >= BATCH:
                self._cond.notify()

    def _take(self) -> list[tuple[str, str]]:
        with self._cond:
            if not self._stopping and len(self._buffer) < BATCH:
                self._cond.wait(FLUSH_S)
            batch = [self._buffer.popleft() for _ in range(min(BATCH * 10, len(self._buffer)))]
            if self.dropped and batch:
                batch.insert(0, (utc_now_iso(), json.dumps(
                    {"ts": utc_now_iso(), "event": "events.dropped", "count": self.dropped,
                     "reason": f"the database was unreachable since {self._down_since}"})))
                self.dropped = 0
            return batch

    def _give_back(self, batch: list[tuple[str, str]]) -> None:
        """Puts a batch that could not be stored back in front, dropping the oldest beyond the bound."""
        with self._cond:
            for item in reversed(batch):
                if json.loads(item[1]).get("event") == "events.dropped":
                    self.dropped += int(json.loads(item[1]).get("count", 0))
                    continue
                self._buffer.appendleft(item)
            while len(self._buffer) > self._max:
                self._buffer.popleft()
                self.dropped += 1
                self.dropped_total += 1

    def _run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        wait = FLUSH_S
        while True:
            with self._cond:
                done = self._stopping and not self._buffer
            if done:
                break
            batch = self._take()
            if not batch:
                continue
            try:
                if conn is None or conn.closed:
                    conn = self._connect()
                with conn.cursor() as cursor:
                    cursor.executemany(_INSERT, [(at, self._holder, text) for at, text in batch])
            except psycopg.Error as exc:
                if not database_away(exc):  # the database refused this batch: kept, it would be refused again
                    log.error("events: the database refused %d event(s), not stored there (events.jsonl has "
                              "them): %s", len(batch), database_error(exc, self._dsn))
                    self.refused += len(batch)
                    continue
                self._give_back(batch)
                if conn is not None:
                    conn.close()
                conn = None
                if self._down_since is None:
                    self._down_since = utc_now_iso()
                    log.warning("events: the database is unreachable (%s); keeping the newest %d events "
                                "to store when it is back", database_error(exc, self._dsn), self._max)
                with self._cond:
                    if self._stopping:
                        break
                    self._cond.wait(wait)
                wait = min(wait * 2, RETRY_MAX_S)
                continue
            self.stored += len(batch)
            if self._down_since is not None:
                log.warning("events: the database is reachable again; stored what was kept")
                self._down_since = None
            wait = FLUSH_S
        if conn is not None:
            conn.close()
        with self._cond:
            if self._buffer or self.dropped:
                log.warning("events: %d event(s) not stored in the database at exit (%d dropped)",
                            len(self._buffer), self.dropped)

    def close(self, timeout: float = CLOSE_WAIT_S) -> None:
        """Stores what is buffered (waiting up to `timeout` for the database), then stops the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout)


def attach_event_sink(events: EventLog, dsn: str) -> Callable[[], None]:
    """Copies every event `events` emits from now on into switchyard_events; returns the closer,
    which stores what is still buffered (call it when the process stops)."""
    sink = EventSink(dsn, redact=events.redact)
    events.observe(sink.observe)
    return sink.close
