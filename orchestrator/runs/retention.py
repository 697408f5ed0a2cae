"""Runs retention: finished runs older than `queue.runs_retention_days` are removed with their coordination records.

Applied by the run executor's hourly maintenance and by `switchyard coordination clean`, on the
run store in use (folders, or the database's rows and this host's folder). A run is
removed only when its state says it finished (done, failed_final, cancelled) longer ago than
the retention: a queued, running, waiting or retryable failed run, or a folder whose state cannot be
read, is never touched. An entry of runs/active.json that still names a finished run is stale (the
index drops ended runs at its next write; `RunStore.active_for` checks the run's state) and does not
keep the run. 0 keeps runs forever.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gateway.home import Home, remove_old_files, remove_stale_tmp, safe_name
from gateway.settings import Settings
from gateway.stores import Locks
from orchestrator.execution.coordination import ARCHIVE_AFTER_DAYS, CHECKPOINT_RETENTION_DAYS, Coordination
from orchestrator.runs.base import REMOVING_PREFIX, RunStoreBase
from orchestrator.runs.state import RunState
from orchestrator.runs.state import finished_at as finished_at  # re-exported: callers read it here

RUNS_RETENTION_DAYS = 30.0
SELECT_RETENTION_DAYS = 7.0  # selector request/result files are kept this long (orchestrator/chat/selector.py)


def expired_runs(store: RunStoreBase, retention_days: float, *, now: datetime | None = None) -> list[RunState]:
    """The finished runs that ended more than `retention_days` ago (none when it is 0), oldest first."""
    if retention_days <= 0:
        return []
    return store.finished_before((now or datetime.now(UTC)) - timedelta(days=retention_days))


def prune_runs(home: Home, store: RunStoreBase, coordination: Coordination, retention_days: float, *,
               now: datetime | None = None) -> list[str]:
    """Removes the expired runs' coordination records, then the runs; returns the run ids removed.

    The run goes last (`RunStore.remove`): interrupted before, the run is still listed and the next
    pass removes the rest. A folder left half-deleted (renamed to a hidden name first, so it is never
    read as a run) is finished at the next pass. completed.jsonl keeps its reports (spec 001:
    append-only, kept indefinitely). Coordination files only: work_queue.json and active_work.json
    lost a run's entries when it finished, and this runs in a worker thread, where the executor's
    in-memory views of those files are not ours.
    """
    _finish_interrupted(home.runs)
    handoffs = _Handoffs(coordination)
    removed = []
    for run in expired_runs(store, retention_days, now=now):
        shutil.rmtree(coordination.checkpoint_dir(run.runId), ignore_errors=True)
        handoffs.remove(run.runId)
        if store.remove(run.runId):
            removed.append(run.runId)
    if retention_days > 0:  # settled runs kept as lines: a whole day at a time, once all of it expired
        removed += store.prune_settled((now or datetime.now(UTC)) - timedelta(days=retention_days))
    return removed


def _finish_interrupted(runs_root: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(runs_root):
            if entry.name.startswith(REMOVING_PREFIX) and entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)


class _Handoffs:
    """The handoff files, pending and archived (`<run>-<step>.json`), listed once and sorted, so each
    run's are found by bisection however many runs are removed in one pass."""

    def __init__(self, coordination: Coordination):
        self._folders: list[tuple[Path, list[str]]] = []
        for folder in (coordination.root / "handoffs", coordination.root / "archive" / "handoffs"):
            with contextlib.suppress(FileNotFoundError):
                self._folders.append((folder, sorted(os.listdir(folder))))

    def remove(self, run_id: str) -> None:
        """Deletes the run's handoffs; a name that merely starts alike (run `a` and run `a-b`) is
        checked against the task_id it holds."""
        prefix = f"{safe_name(run_id)}-"
        for folder, names in self._folders:
            index = bisect.bisect_left(names, prefix)
            while index < len(names) and names[index].startswith(prefix):
                path = folder / names[index]
                index += 1
                if _task_id(path) in (run_id, None):
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()


def _task_id(path: Path) -> str | None:
    """The task_id a handoff file names (None when unreadable: it is removed with the run it is named after)."""
    try:
        record = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return str(record.get("task_id")) if isinstance(record, dict) and record.get("task_id") else None


def retention_settings(settings: Settings) -> dict[str, float | None]:
    """Every retention in force, in days, for `status` (None: kept forever)."""
    return {"sent": settings.queue.sent_retention_days, "selector_files": SELECT_RETENTION_DAYS,
            "coordination_archive": ARCHIVE_AFTER_DAYS, "checkpoints": CHECKPOINT_RETENTION_DAYS,
            "runs": settings.queue.runs_retention_days or None}


def prune_selector_files(home: Home, older_than_days: float = SELECT_RETENTION_DAYS) -> int:
    """Deletes selector request and result files older than `older_than_days`, and temporary files
    a writer killed mid-write left behind; returns how many."""
    removed = 0
    for folder in (home.select_incoming, home.select_results):
        removed += len(remove_stale_tmp(folder))
        removed += len(remove_old_files(folder, lambda name: name.endswith(".json"), older_than_days * 86400))
    return removed


def apply_retention(home: Home, store: RunStoreBase, coordination: Coordination, runs_days: float, *,
                    archive_after_days: float = ARCHIVE_AFTER_DAYS, checkpoint_days: float = CHECKPOINT_RETENTION_DAYS,
                    shared_locks: Locks | None = None) -> dict[str, Any]:
    """Every retention of the orchestrator once: spec-001's (checkpoints, archive, expired lock files), the
    selector's request and result files, the expired locks of `shared_locks` (the database's), finished runs;
    returns what it did. The executor's hourly maintenance and `switchyard coordination clean` call it."""
    report = coordination.clean(archive_after_days=archive_after_days, checkpoint_days=checkpoint_days)
    report["selector_files_removed"] = prune_selector_files(home)
    if shared_locks is not None:
        report["locks_freed"] += shared_locks.clean_expired()
    report["runs_removed"] = prune_runs(home, store, coordination, runs_days)
    return report
