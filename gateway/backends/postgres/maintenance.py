"""Retention on the PostgreSQL backend: what the shared tables no longer need, deleted.

- events older than `queue.events_retention_days` (0 keeps them forever);
- answered identities older than `queue.duplicate_window_sec` (a repeat after that is answered again,
  as on the file backend);
- delivered replies and finished messages (with their stored attachments) older than
  `queue.sent_retention_days`, and never younger than the duplicate window; the copies under
  `files.shared_dir` that no remaining message names go with them (a relative shared_dir resolves
  against `home`; without one, only an absolute shared_dir is cleaned).

Dead letters, queued and running messages, pending replies and leases are never touched. Deleting is
idempotent, so two hosts pruning at once do no harm, only double work: each process calls
`prune_alone` at most once every PRUNE_INTERVAL_S (gateway.backends.postgres.processing), and it skips its turn while
another process of the same schema is pruning (a transaction-level advisory try-lock).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import psycopg

from gateway.backends.postgres.files import unused_shared
from gateway.home import Home
from gateway.settings import Settings

PRUNE_INTERVAL_S = 3600.0
PRUNE_LOCK_CLASS = 0x5359  # the advisory lock (class, hashtext(schema)) held by the process pruning a schema
TRY_LOCK = "SELECT pg_try_advisory_xact_lock(%s, hashtext(current_schema()))"


def prune(conn: psycopg.Connection[Any], settings: Settings, home: Home | None = None) -> dict[str, int]:
    """Deletes what retention allows, in one transaction; returns how many rows of each kind (and
    shared copies removed)."""
    counts = _prune(conn, settings, home, alone=False)
    assert counts is not None
    return counts


def prune_alone(conn: psycopg.Connection[Any], settings: Settings, home: Home | None = None) -> dict[str, int] | None:
    """`prune`, unless another process is pruning the same schema right now: then None, nothing done."""
    return _prune(conn, settings, home, alone=True)


def _prune(conn: psycopg.Connection[Any], settings: Settings, home: Home | None, *,
           alone: bool) -> dict[str, int] | None:
    queue = settings.queue
    kept_s = max(queue.sent_retention_days * 86400, float(queue.duplicate_window_sec))
    counts: dict[str, int] = {}
    with conn.transaction():
        if alone:
            row = conn.execute(TRY_LOCK, (PRUNE_LOCK_CLASS,)).fetchone()
            if not (row and row[0]):
                return None
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
