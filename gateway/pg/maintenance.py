"""Retention on the PostgreSQL backend: what the shared tables no longer need, deleted.

- events older than `queue.events_retention_days` (0 keeps them forever);
- answered identities older than `queue.duplicate_window_sec` (a repeat after that is answered again,
  as on the file backend);
- delivered replies and finished messages (with their stored attachments) older than
  `queue.sent_retention_days`, and never younger than the duplicate window; the copies under
  `files.shared_dir` that no remaining message names go with them (a relative shared_dir resolves
  against `home`; without one, only an absolute shared_dir is cleaned).

Dead letters, queued and running messages, pending replies and leases are never touched. Any process
may call `prune` (say hourly); deleting is idempotent, so two hosts pruning at once do no harm.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import psycopg

from gateway.home import Home
from gateway.pg.files import unused_shared
from gateway.settings import Settings


def prune(conn: psycopg.Connection[Any], settings: Settings, home: Home | None = None) -> dict[str, int]:
    """Deletes what retention allows, in one transaction; returns how many rows of each kind (and
    shared copies removed)."""
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
        shared = [row[0] for row in conn.execute(
            "DELETE FROM switchyard_files f USING switchyard_messages m WHERE f.message_name = m.name "
            "AND m.state = 'done' AND m.updated_at < now() - make_interval(secs => %s) AND f.data IS NULL "
            "RETURNING f.path", (kept_s,))]
        counts["done"] = conn.execute(
            "DELETE FROM switchyard_messages WHERE state = 'done' AND updated_at < now() - make_interval(secs => %s)",
            (kept_s,)).rowcount
        unused = unused_shared(conn, sorted(set(shared)))
    root = _shared_root(settings, home)
    counts["shared_files"] = 0
    if root is not None:
        for relative in unused:  # after the commit: a crash before leaves a stray copy, never a missing one
            with contextlib.suppress(FileNotFoundError):
                os.unlink(root / relative)
                counts["shared_files"] += 1
    return counts


def _shared_root(settings: Settings, home: Home | None) -> Path | None:
    shared = settings.files.shared_dir
    if not shared:
        return None
    if home is not None:
        return home.resolve(shared)
    return Path(shared) if Path(shared).is_absolute() else None
