"""The orchestrator's in-memory stores: runs and session/history records kept in this process, with the
rules of the file and database stores (orchestrator/storage/stores.py), for fast tests. Two stores built on one
shared state behave as two hosts sharing one database."""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from gateway.storable import made_safe
from gateway.telemetry.events import utc_now_iso
from orchestrator.agents.sessions import Change, Record
from orchestrator.runs.state import RunState, conversation_key, finished_at, stored_conversation_key


@dataclass
class RunsState:
    """What every MemoryRunStore on it sees: runs by id (with a change counter), events, active runs."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    runs: dict[str, tuple[int, RunState]] = field(default_factory=dict)
    events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    active: dict[str, str] = field(default_factory=dict)
    cancels: set[str] = field(default_factory=set)
    changes: int = 0


class MemoryRunStore:
    """A run store in memory (orchestrator.storage.stores.RunRecords); events are held until the run's next write
    or `close_events`, as the database store does."""

    shared = True  # the runs are seen by every store on the same state

    def __init__(self, state: RunsState | None = None):
        self.state = state if state is not None else RunsState()
        self._pending: dict[str, list[dict[str, Any]]] = {}

    def _store(self, run: RunState) -> RunState:
        run = RunState.model_validate(made_safe(run.model_dump(mode="json")))  # a NUL: U+FFFD, as on disk
        with self.state.lock:
            self.state.changes += 1
            self.state.runs[run.runId] = (self.state.changes, run)
            self.state.events.setdefault(run.runId, []).extend(self._pending.pop(run.runId, []))
        return run

    def save(self, run: RunState, *, durable: bool = True) -> RunState:
        return self._store(run.model_copy(update={"updatedAt": utc_now_iso()}))

    def create(self, run: RunState, key: str | None, *, durable: bool = True) -> RunState:
        self.append_event(run.runId, "run.created", workflowId=run.workflowId)
        run = self.save(run, durable=durable)
        if key is not None:
            self.set_active(key, run.runId)
        return run

    def sync(self, run_id: str) -> None:
        """Nothing to make durable in memory."""

    def load(self, run_id: str) -> RunState | None:
        with self.state.lock:
            stored = self.state.runs.get(run_id)
        return stored[1].model_copy(deep=True) if stored is not None else None

    def read(self, run_id: str) -> RunState | None:
        return self.load(run_id)  # a run in memory is always a run

    def quarantine(self, run_id: str, reason: str) -> RunState | None:
        return None  # nothing in memory can be unreadable

    def unreadable(self) -> list[tuple[str, str]]:
        return []

    def transient(self, exc: BaseException) -> bool:
        return False  # memory is never away

    def append_event(self, run_id: str, event: str, **fields: Any) -> None:
        record = {"ts": utc_now_iso(), "event": event, **{k: v for k, v in fields.items() if v is not None}}
        self._pending.setdefault(run_id, []).append(made_safe(copy.deepcopy(record)))

    def close_events(self, run_id: str | None = None) -> None:
        with self.state.lock:
            for key in [run_id] if run_id is not None else list(self._pending):
                self.state.events.setdefault(key, []).extend(self._pending.pop(key, []))

    def events(self, run_id: str, limit: int = 20) -> list[dict[str, Any]]:
        with self.state.lock:
            return copy.deepcopy(self.state.events.get(run_id, [])[-limit:])

    def set_active(self, key: str, run_id: str) -> None:
        with self.state.lock:
            self.state.active[key] = run_id

    def active_runs(self) -> dict[str, str]:
        with self.state.lock:
            return dict(self.state.active)

    def restore_active(self, unfinished: list[RunState]) -> None:
        newest: dict[str, str] = {}
        for run in unfinished:  # oldest first: the newest wins
            with contextlib.suppress(ValidationError):  # its message is not one: it ends at its claim
                newest[conversation_key(run.payload())] = run.runId
        open_ids = {run.runId for run in unfinished}
        with self.state.lock:
            kept = {key: run_id for key, run_id in self.state.active.items() if run_id in open_ids}
            self.state.active = {**kept, **{key: run_id for key, run_id in newest.items() if key not in kept}}

    def active_for(self, key: str) -> RunState | None:
        with self.state.lock:
            run_id = self.state.active.get(key)
        run = self.load(run_id) if run_id else None
        return run if run is not None and not run.finished else None

    def _sorted(self, *, newest_first: bool) -> list[RunState]:
        with self.state.lock:
            stored = list(self.state.runs.values())
        if newest_first:
            return [run.model_copy(deep=True) for _, run in sorted(stored, key=lambda s: s[0], reverse=True)]
        return [run.model_copy(deep=True) for _, run in sorted(stored, key=lambda s: (s[1].createdAt, s[1].runId))]

    def all_runs(self) -> list[RunState]:
        return self._sorted(newest_first=False)

    def recent(self, limit: int) -> list[RunState]:
        return self._sorted(newest_first=True)[:limit]

    def last_for(self, key: str) -> RunState | None:
        """The conversation's newest run, finished or not (every run in memory looked at)."""
        with self.state.lock:
            runs = [run for _, run in self.state.runs.values() if stored_conversation_key(run.message) == key]
        newest = max(runs, key=lambda run: (run.createdAt, run.runId), default=None)
        return newest.model_copy(deep=True) if newest is not None else None

    def unfinished(self) -> list[RunState]:
        return [run for run in self.all_runs() if not run.finished]

    def needing_recovery(self) -> list[RunState]:
        return [run for run in self.all_runs() if not (run.finished and run.delivery is not None)]

    def finished_before(self, cutoff: datetime) -> list[RunState]:
        return [run for run in self.all_runs() if run.finished and (ended := finished_at(run)) and ended < cutoff]

    def queued(self, limit: int) -> list[tuple[str, str | None]]:
        now = utc_now_iso()
        waiting = [run for run in self.all_runs() if run.state == "queued"]  # oldest created first
        waiting.sort(key=lambda run: run.job.next_retry_at is not None and run.job.next_retry_at > now)
        return [(run.runId, run.job.next_retry_at) for run in waiting[:limit]]

    def running_ids(self) -> list[str]:
        return [run.runId for run in self.all_runs() if run.state == "running"]

    def remove(self, run_id: str) -> bool:
        with self.state.lock:
            self.state.events.pop(run_id, None)
            self.state.active = {k: v for k, v in self.state.active.items() if v != run_id}
            self.state.cancels.discard(run_id)
            return self.state.runs.pop(run_id, None) is not None

    def request_cancel(self, run_id: str) -> None:
        with self.state.lock:
            self.state.cancels.add(run_id)

    def cancel_requests(self, run_ids: Iterable[str]) -> set[str]:
        with self.state.lock:
            return set(run_ids) & self.state.cancels

    def clear_cancel(self, run_id: str) -> None:
        with self.state.lock:
            self.state.cancels.discard(run_id)


class MemoryRecords:
    """Session or history records in memory (orchestrator.agents.sessions.Records); `update` is atomic, as the
    database's row lock makes it: two handles changing one record at once both keep their change."""

    def __init__(self, shared: dict[tuple[str, ...], Record] | None = None, lock: threading.Lock | None = None):
        self._records = shared if shared is not None else {}
        self._lock = lock or threading.Lock()

    def read(self, key: tuple[str, ...]) -> Record:
        with self._lock:
            return copy.deepcopy(self._records.get(tuple(key), {}))

    def update(self, key: tuple[str, ...], change: Change, *, durable: bool = True) -> None:
        with self._lock:
            current = copy.deepcopy(self._records.get(tuple(key), {}))
            self._records[tuple(key)] = made_safe(change(current))

    def every(self) -> Iterator[Record]:
        with self._lock:
            records = copy.deepcopy(list(self._records.values()))
        yield from records

    def twin(self) -> MemoryRecords:
        """A second handle on the same records (another "host")."""
        return MemoryRecords(self._records, self._lock)


if TYPE_CHECKING:  # mypy checks that each memory store satisfies its protocol
    from orchestrator.agents.sessions import Records
    from orchestrator.storage.stores import RunRecords

    _runs: type[RunRecords] = MemoryRunStore
    _records: type[Records] = MemoryRecords
