"""Retention on the PostgreSQL backend: what the shared tables no longer need, deleted.

- events older than `queue.events_retention_days` (0 keeps them forever);
- answered identities older than `queue.duplicate_window_sec` (a repeat after that is answered again,
  as on the file backend);
- delivered replies and finished messages (with their stored attachments) older than
  `queue.sent_retention_days`, and never younger than the duplicate window.

Dead letters, queued and running messages, pending replies and leases are never touched. Any process
may call `prune` (say hourly); deleting is idempotent, so two hosts pruning at once do no harm.
"""

from __future__ import annotations

from typing import Any

import psycopg

from gateway.settings import Settings


def prune(conn: psycopg.Connection[Any], settings: Settings) -> dict[str, int]:
    """Deletes what retention allows, in one transaction; returns how many rows of each kind."""
    queue = settings.queue
    kept_s = max(queue.sent_retention_days * 86400, float(queue.duplicate_window_sec))
    counts: dict[str, int] = {}
    with conn.transaction():
        if queue.events_retention_days > 0:
            counts["events"] = conn.execute(
                "DELETE FROM switchyard_events WHERE at < now() - make_interval(secs => %s)",
                (queue.events_retention_days * 86400,)).rowcount
        counts["answered"] = conn.execute(
            "DELETE FROM switchyard_answered WHERE answered_at < now() - make_interval(secs => %s)",
            (float(queue.duplicate_window_sec),)).rowcount
        counts["sent"] = conn.execute(
            "DELETE FROM switchyard_outbox WHERE state = 'sent' AND coalesce(sent_at, created_at) "
            "< now() - make_interval(secs => %s)", (kept_s,)).rowcount
        counts["done"] = conn.execute(
            "DELETE FROM switchyard_messages WHERE state = 'done' AND updated_at < now() - make_interval(secs => %s)",
            (kept_s,)).rowcount
    return counts
