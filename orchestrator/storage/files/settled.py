"""Settled runs as runs: the file run store's archive (orchestrator.storage.files.runarchive) written and read a
whole run
at a time, the runs archived last kept in memory (a waiting message reads its run's result there)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.runs.jobs import iso, parse_iso
from orchestrator.runs.state import RunState
from orchestrator.storage.files.runarchive import CorruptIndex, Entry, RunArchive

log = logging.getLogger("switchyard.orchestrator.runs")

CANCEL_MARKER = "cancel.request"  # a run folder's cancel request from another process sharing the home
KEPT_IN_MEMORY = 256  # runs archived last
LINE_HOLDS = frozenset({"state.json", "events.jsonl", CANCEL_MARKER})  # what of a folder its line replaces
Filter = Callable[[Entry], bool]


class SettledRuns:
    """The settled runs of one home's `runs/`."""

    def __init__(self, runs_root: Path, *, fsync: bool):
        self._archive = RunArchive(runs_root, fsync=fsync)
        self._recent: OrderedDict[str, RunState] = OrderedDict()

    def add(self, run: RunState, state: bytes, events: list[bytes]) -> None:
        """Archives a run: its state JSON (`state`, one line) and its events' lines."""
        line = b'{"run":' + state + b',"events":[' + b",".join(events) + b"]}\n"
        self._archive.add(run.runId, run.createdAt, run.state, line)
        self._recent[run.runId] = run
        if len(self._recent) > KEPT_IN_MEMORY:
            self._recent.popitem(last=False)

    def get(self, run_id: str) -> RunState | None:
        """A settled run (None: it is not archived)."""
        run = self._recent.get(run_id)
        if run is not None:
            return run
        entry = self._archive.find(run_id)
        runs = self._runs([entry]) if entry is not None else []
        return runs[0] if runs else None

    def holds(self, run_id: str) -> bool:
        """Whether the run is archived."""
        return self._archive.find(run_id) is not None

    def log_of(self, run_id: str) -> Path | None:
        """The log holding the run's line."""
        entry = self._archive.find(run_id)
        return self._archive.root / f"{entry.day}.jsonl" if entry is not None else None

    def events(self, run_id: str, limit: int) -> list[dict[str, Any]]:
        """The last `limit` events of a settled run."""
        entry = self._archive.find(run_id)
        line = self._archive.line(entry) if entry is not None else None
        events = line.get("events") if line is not None else None
        return [event for event in events[-limit:] if isinstance(event, dict)] if isinstance(events, list) else []

    def newest(self, limit: int, keep: Filter, since: datetime | None = None) -> tuple[list[RunState], int | None]:
        """The `limit` newest kept runs by creation (0: all), created `since` if given, newest first, and how
        many are kept (None: not counted, the reading stopped early)."""
        floor = iso(since) if since is not None else ""
        entries, counted = self._top(limit, lambda e: (e.created, e.run_id), keep, floor)
        return self._runs(entries), counted

    def changed_last(self, limit: int, keep: Filter) -> list[RunState]:
        """The `limit` kept runs archived last, newest first."""
        return self._runs(self._top(limit, lambda e: (e.archived, e.run_id), keep)[0])

    def count(self) -> int:
        """How many runs are archived."""
        return self._archive.count()

    def prune(self, cutoff: datetime) -> list[str]:
        """Removes the days whose runs were all archived before `cutoff`; their run ids."""
        removed = self._archive.prune(iso(cutoff))
        for run_id in removed:
            self._recent.pop(run_id, None)
        return removed

    def _top(self, limit: int, key: Callable[[Entry], tuple[str, str]], keep: Filter, floor: str = ""
             ) -> tuple[list[Entry], int | None]:
        try:
            return self._archive.top(limit, key, keep, floor)
        except CorruptIndex:  # that index was rebuilt from its log meanwhile
            return self._archive.top(limit, key, keep, floor)

    def _runs(self, entries: list[Entry]) -> list[RunState]:
        runs = []
        for entry in entries:
            line = self._archive.line(entry)
            try:
                runs.append(RunState.model_validate((line or {})["run"]))
            except (KeyError, ValidationError):
                log.error("run %s: its archived line cannot be read (%s)", entry.run_id, entry.day)
        return runs


def line_holds(folder: Path) -> bool:
    """True when a run's folder holds nothing its archived line cannot: its state, events, a cancel marker,
    empty `workspace/` and `outputs/` folders."""
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return False
    for entry in entries:
        if entry.name in LINE_HOLDS and entry.is_file(follow_symlinks=False):
            continue
        if entry.name in ("workspace", "outputs") and entry.is_dir(follow_symlinks=False) \
                and not os.listdir(entry.path):
            continue
        return False
    return any(entry.name == "state.json" for entry in entries)


def event_lines(path: Path) -> list[bytes]:
    """The readable lines of an events.jsonl (a line torn by a crash is left out)."""
    try:
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        return []
    kept = []
    for line in lines:
        with contextlib.suppress(ValueError):
            json.loads(line)
            kept.append(line)
    return kept


def created_at(text: str) -> datetime:
    """A creation stamp as a time (the earliest time for one that is not a time)."""
    try:
        return parse_iso(text)
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)
