"""The dashboard's view of the queue on the PostgreSQL backend: every host's messages, not this home's folders.

The rows keep the file backend's folder names, so the page and the `switchyard_queue_depth{folder}`
gauge read the same on both backends: `incoming` is the queued messages, `processing` the running
ones, `outgoing` the pending replies, `failed` the dead messages and replies (the `dead` command's
letters), `sent` the delivered replies still kept. In flight are the running messages of every
worker; the processes attached and the channel owners come from gateway/backends/postgres/status.py. While the
database cannot be read, the view shows this home's folders and says why.
"""

from __future__ import annotations

from typing import Any

import psycopg

from gateway.backends.postgres import status
from gateway.backends.postgres.db import SharedPool
from gateway.backends.postgres.deadletters import DeadStore
from gateway.home import Home
from gateway.settings import QueueSettings
from gateway.spool.folders import queue_folders
from gateway.telemetry.redaction import database_error

_RUNNING = """
SELECT name, channel, profile, conversation, attempts + 1, updated_at, extract(epoch FROM now() - updated_at)
  FROM switchyard_messages WHERE state = 'running' ORDER BY updated_at, id LIMIT %s
"""
IN_FLIGHT_SHOWN = 100


class PgQueueView:
    """The queue, the messages in flight, the dead letters (retried through DeadStore), the processes
    and the channel owners, as the database holds them."""

    def __init__(self, dsn: str, settings: QueueSettings, home: Home, pool: SharedPool | None = None):
        self.dsn = dsn
        self.pool = pool or SharedPool(dsn)  # its backend's; its own when built alone (tests)
        self.settings = settings
        self.home = home
        self.dead = DeadStore(dsn, home)  # the database's dead letters and what the intake quarantined here

    def live(self) -> dict[str, Any]:
        """The queue and the running messages (what `/metrics` reads at scrape time)."""
        try:
            with self.pool.connection() as conn:
                return {"queue": _folders(status.depths(conn), conn), "in_flight": _running(conn)}
        except psycopg.Error as exc:
            return self._unreadable(exc)

    def read(self, shown: int) -> dict[str, Any]:
        """`live`, the first `shown` dead letters, the processes attached and the channel owners."""
        try:
            with self.pool.connection() as conn:
                depths = status.depths(conn)
                seen = {"queue": _folders(depths, conn), "in_flight": _running(conn),
                        "processes": status.processes(conn, self.settings), "leases": status.leases(conn)}
            letters = (self.dead.list_dead(read_payloads=False) if depths["dead"][0] or depths["replies_dead"][0]
                       or self.dead.has_local() else [])
        except psycopg.Error as exc:
            return {**self._unreadable(exc), "dead_total": 0, "dead_letters": []}
        return {**seen, "dead_total": len(letters),
                "dead_letters": [{k: v for k, v in letter.to_json().items() if k != "path"}
                                 for letter in letters[:shown]]}

    def retry(self, names: list[str]) -> list[str]:
        """Puts dead letters back in the database (KeyError naming any that is not one)."""
        return self.dead.retry(names)

    def _unreadable(self, exc: psycopg.Error) -> dict[str, Any]:
        queue, _ = queue_folders(self.home)
        return {"queue": queue, "in_flight": [], "database": database_error(exc, self.dsn, doing="read")}


def _folders(depths: dict[str, tuple[int, float | None]], conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    dead, dead_age = depths["dead"]
    replies_dead, replies_dead_age = depths["replies_dead"]
    ages = [age for age in (dead_age, replies_dead_age) if age is not None]
    row = conn.execute("SELECT count(*) FROM switchyard_outbox WHERE state = 'sent'").fetchone()
    return [
        {"folder": "incoming", "depth": depths["queued"][0], "oldest_age_s": depths["queued"][1]},
        {"folder": "processing", "depth": depths["running"][0], "oldest_age_s": depths["running"][1]},
        {"folder": "outgoing", "depth": depths["replies_pending"][0], "oldest_age_s": depths["replies_pending"][1]},
        {"folder": "failed", "depth": dead + replies_dead, "oldest_age_s": max(ages) if ages else None},
        {"folder": "sent", "depth": int(row[0]) if row else 0, "oldest_age_s": None},
    ]


def _running(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return [{"name": name, "channel": channel, "profile": profile, "conversation": conversation,
             "attempt": attempt, "claimed_at": status.iso(since), "elapsed_s": round(float(elapsed), 1)}
            for name, channel, profile, conversation, attempt, since, elapsed
            in conn.execute(_RUNNING, (IN_FLIGHT_SHOWN,))]
