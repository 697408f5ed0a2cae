"""The coordination directory of spec 001 (`<home>/coordination/`), kept by the runtime for agents to read."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic_core import PydanticSerializationError, to_json, to_jsonable_python

from gateway.disk.locks import LockDirectory
from gateway.home import Home, atomic_write, safe_name
from gateway.storable import made_safe, storable
from gateway.telemetry.events import utc_now_iso
from orchestrator.runs.jobs import parse_iso

if TYPE_CHECKING:
    import asyncio

log = logging.getLogger("switchyard.orchestrator.coordination")

FLUSH_SEC = 0.25  # work_queue.json, active_work.json and a task's checkpoint are written at most this often
ARCHIVE_AFTER_DAYS = 30.0
CHECKPOINT_RETENTION_DAYS = 7.0
CHECKPOINT_FILES = ("metadata", "state", "context", "artifacts")
ARCHIVED_FOLDERS = ("handoffs", "projects")
README = """\
# Coordination directory (kept by Switchyard; agents may read it)

- work_queue.json   pending workflow runs: {"tasks": [{id, type, priority, agent, context, created_at}]}
- active_work.json  runs executing now (a list: several run at once)
  (both rewritten at most four times a second)
- completed.jsonl   one completion report per finished run (append-only; never edit it)
- checkpoints/<run>/{metadata,state,context,artifacts}.json   written at the step boundaries of a
  multi-step run (at most four times a second) and at its end
- handoffs/*.json   a pending handoff from one agent step to the next
- locks/*.json      TTL locks (holder, resource, acquired_at, expires_at, pid)
- archive/          files moved here after 30 days

Retention: `switchyard coordination clean` (also hourly while `switchyard run` runs).
"""


def pretty_json(value: Any) -> bytes:
    """`value` as indented UTF-8 JSON, by pydantic-core's encoder (json's indented encoder is pure Python:
    ten times slower, and these files are written for every run)."""
    try:
        return to_json(value, indent=2, fallback=str)
    except PydanticSerializationError:  # a lone surrogate (an agent's summary, say): U+FFFD
        return to_json(made_safe(to_jsonable_python(value, fallback=str)), indent=2)


class Coordination:
    """Reads and writes work_queue.json, active_work.json, completed.jsonl, checkpoints/ and handoffs/.

    work_queue.json and active_work.json are views for agents (recover() rebuilds them from the runs):
    with an event loop running, changes are kept in memory and written together at most every
    FLUSH_SEC, under one flock, so several `switchyard run` processes sharing a home never lose each
    other's entries; a run that starts and ends within one interval changes neither file. Reads in this
    process see the pending changes. A crash loses at most the last interval's changes, which the next
    start's recovery rewrites from the runs' state. Checkpoints too are written at the next flush (the
    latest of a task's boundaries wins) and at once at a task's end. Without a loop (a CLI command)
    each change is written at once.
    """

    def __init__(self, home: Home, *, fsync: bool = False):
        self.root = home.coordination
        self._fsync = fsync
        self._written: dict[tuple[str, str], bytes] = {}  # last checkpoint file contents, to skip rewrites
        self._pending: dict[tuple[str, str | None], list[Callable[[list[dict[str, Any]]], list[dict[str, Any]]]]] = {}
        self._views: dict[tuple[str, str | None], list[dict[str, Any]]] = {}  # the files with pending changes
        self._timer: asyncio.TimerHandle | None = None
        self._checkpoints: dict[str, dict[str, Any]] = {}  # the latest checkpoint of a task, not yet written
        self._folders: set[str] = set()  # tasks whose checkpoint folder exists
        for name in ("checkpoints", "handoffs", "locks", "projects", "archive"):
            (self.root / name).mkdir(parents=True, exist_ok=True)
        if not (self.root / "README.md").exists():
            atomic_write(self.root / "README.md", README.encode(), fsync=False)

    # --- work_queue.json and active_work.json ---------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with (self.root / ".coordination.lock").open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _read(self, name: str, key: str | None) -> list[dict[str, Any]]:
        try:
            data = json.loads((self.root / name).read_bytes())
        except (FileNotFoundError, ValueError):
            return []
        items = data.get(key) if key is not None and isinstance(data, dict) else data
        return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []

    def _view(self, name: str, key: str | None) -> list[dict[str, Any]]:
        """The file's items with this process's pending changes applied."""
        view = self._views.get((name, key))
        return [dict(item) for item in view] if view is not None else self._read(name, key)

    def _update(self, name: str, key: str | None, change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
                ) -> None:
        self._views[(name, key)] = change(self._view(name, key))
        self._pending.setdefault((name, key), []).append(change)
        if not self._schedule():
            self.flush()

    def _schedule(self) -> bool:
        """Arms the flush in FLUSH_SEC unless it is armed; False without a running loop."""
        try:
            import asyncio  # here: `status` imports this module for its retention figures

            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        if self._timer is None:
            self._timer = loop.call_later(FLUSH_SEC, self.flush)
        return True

    def flush(self) -> None:
        """Writes the pending checkpoints, then the pending changes of both files under one lock (each
        file only if it changed)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for task_id in list(self._checkpoints):
            try:
                self._write_checkpoint(task_id)
            except OSError as exc:  # a view: the task's next boundary or end writes it again
                log.warning("cannot write the checkpoint of %s: %s", task_id, exc)
        if not self._pending:
            return
        try:
            with self._locked():
                for (name, key), changes in self._pending.items():
                    before = self._read(name, key)
                    items = [dict(item) for item in before]
                    for change in changes:
                        items = change(items)
                    if items == before and (self.root / name).exists():
                        continue
                    body: Any = {key: items} if key is not None else items
                    atomic_write(self.root / name, pretty_json(body), fsync=self._fsync)
        except OSError as exc:  # e.g. a full disk: the changes stay pending and are tried again
            log.warning("cannot write the coordination files: %s", exc)
            self._schedule()  # armed anew: flush cleared the timer
            return
        self._pending.clear()
        self._views.clear()

    def pending(self) -> list[dict[str, Any]]:
        """The tasks of work_queue.json, oldest first."""
        return sorted(self._view("work_queue.json", "tasks"), key=lambda t: (str(t.get("created_at")), t["id"]))

    def enqueue(self, task: dict[str, Any]) -> None:
        """Adds (or replaces) a pending task: `{id, type, priority, agent, context, created_at}`."""
        self._update("work_queue.json", "tasks", lambda tasks: [*(t for t in tasks if t.get("id") != task["id"]),
                                                                 task])

    def dequeue(self, task_id: str) -> None:
        """Removes a task from the pending queue."""
        self._update("work_queue.json", "tasks", lambda tasks: [t for t in tasks if t.get("id") != task_id])

    def active(self) -> list[dict[str, Any]]:
        """The entries of active_work.json (a list: several tasks execute at once)."""
        return self._view("active_work.json", None)

    def activate(self, entry: dict[str, Any]) -> None:
        """Moves a task from pending to active: `{task_id, agent, status, started_at, last_update, context}`."""
        self.dequeue(entry["task_id"])
        self._update("active_work.json", None,
                     lambda items: [*(i for i in items if i.get("task_id") != entry["task_id"]), entry])

    def touch(self, task_id: str, **context: Any) -> None:
        """Refreshes an active task's `last_update` (and merges context fields, e.g. the current step)."""
        def change(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
            for item in items:
                if item.get("task_id") == task_id:
                    item["last_update"] = utc_now_iso()
                    item["context"] = {**(item.get("context") or {}), **context}
                    if "agent" in context:
                        item["agent"] = context["agent"]
            return items
        self._update("active_work.json", None, change)

    def deactivate(self, task_id: str) -> None:
        """Removes a task from active_work.json."""
        self._update("active_work.json", None, lambda items: [i for i in items if i.get("task_id") != task_id])

    # --- completed.jsonl, checkpoints, handoffs ---------------------------------------------------

    def complete(self, report: dict[str, Any]) -> None:
        """Appends one completion report to completed.jsonl (append-only, never rewritten)."""
        text = json.dumps(report, ensure_ascii=False, default=str)
        if not storable(text):  # a lone surrogate (an agent's summary, say) cannot be written: U+FFFD
            text = json.dumps(made_safe(json.loads(text)), ensure_ascii=False)
        line = (text + "\n").encode()
        fd = os.open(self.root / "completed.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def completed(self) -> list[dict[str, Any]]:
        """Every completion report, oldest first."""
        try:
            lines = (self.root / "completed.jsonl").read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        reports = []
        for line in lines:
            with contextlib.suppress(ValueError):
                reports.append(json.loads(line))
        return reports

    def checkpoint_dir(self, task_id: str) -> Path:
        """`checkpoints/<task-id>/`."""
        return self.root / "checkpoints" / safe_name(task_id)

    def checkpoint(self, task_id: str, parts: dict[str, Any], *, now: bool = False) -> None:
        """Records metadata/state/context/artifacts.json of a task, written (each atomically) at the next
        flush, so a task's boundaries within FLUSH_SEC of each other write only the last one; at once
        with `now` (a task's end) or without an event loop."""
        self._checkpoints[task_id] = parts
        if now or not self._schedule():
            self._write_checkpoint(task_id)

    def _write_checkpoint(self, task_id: str) -> None:
        parts = self._checkpoints.pop(task_id, None)
        if parts is None:
            return
        folder = self.checkpoint_dir(task_id)
        if task_id not in self._folders:
            folder.mkdir(parents=True, exist_ok=True)
            self._folders.add(task_id)
        for name in CHECKPOINT_FILES:
            if name in parts:
                data = pretty_json(parts[name])
                if self._written.get((task_id, name)) == data:
                    continue
                atomic_write(folder / f"{name}.json", data, fsync=self._fsync)
                self._written[(task_id, name)] = data

    def forget(self, task_id: str) -> None:
        """Drops the remembered checkpoint contents of a finished task."""
        for key in [k for k in self._written if k[0] == task_id]:
            del self._written[key]
        self._checkpoints.pop(task_id, None)
        self._folders.discard(task_id)

    def handoff(self, record: dict[str, Any]) -> Path:
        """Queues a handoff from one agent to the next in `handoffs/`; returns its path."""
        name = f"{safe_name(record['task_id'])}-{safe_name(str(record['from_step']))}.json"
        path = self.root / "handoffs" / name
        atomic_write(path, pretty_json(record), fsync=self._fsync)
        return path

    def take_handoff(self, path: Path) -> None:
        """Removes a handoff once the receiving step completed (the queue holds pending ones only)."""
        path.unlink(missing_ok=True)

    # --- retention ---------------------------------------------------------------------------------

    def clean(self, *, archive_after_days: float = ARCHIVE_AFTER_DAYS,
              checkpoint_days: float = CHECKPOINT_RETENTION_DAYS, holder: str = "cleaner") -> dict[str, Any]:
        """Applies the retention policy; returns what it did (completed.jsonl is kept indefinitely)."""
        now = datetime.now(UTC)
        report: dict[str, Any] = {"checkpoints_removed": [], "archived": [], "locks_freed": []}
        for folder in sorted((self.root / "checkpoints").iterdir()):
            finished = _completed_at(folder)
            if finished is not None and now - finished > timedelta(days=checkpoint_days):
                shutil.rmtree(folder, ignore_errors=True)
                report["checkpoints_removed"].append(folder.name)
        cutoff = time.time() - archive_after_days * 86400
        for name in ARCHIVED_FOLDERS:
            for path in sorted((self.root / name).rglob("*")):
                if path.is_file() and path.stat().st_mtime < cutoff:
                    target = self.root / "archive" / path.relative_to(self.root)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(path, target)
                    report["archived"].append(str(target.relative_to(self.root)))
        report["locks_freed"] = LockDirectory(self.root / "locks", holder=holder).clean_expired()
        return report


def _completed_at(folder: Path) -> datetime | None:
    try:
        metadata = json.loads((folder / "metadata.json").read_bytes())
        return parse_iso(str(metadata["completed_at"])) if metadata.get("completed_at") else None
    except (OSError, ValueError, KeyError, TypeError):
        return None
