"""The orchestrator's stores as protocols: runs (orchestrator/storage/files/runs.py RunStore,
orchestrator/storage/postgres/runs.py
PgRunStore, orchestrator/storage/memory.py MemoryRunStore) and the records behind provider sessions and each
conversation's history (orchestrator/agents/sessions.py Records: FileRecords, PgRecords, MemoryRecords), the
claimed occurrences of scheduled prompts (orchestrator/schedules/records.py ScheduleRecords) and the per-day usage
totals (orchestrator/usage/records.py UsageRecords).
tests/contract/ checks the rules written here once against every backend.

RunRecords is the storage part of a run store: what every backend writes and reads. The lifecycle on top
of it (`transition`, `update_step`: the transition table and the events they append) is written once in
orchestrator/runs/base.py RunStoreBase, which RunStore and PgRunStore extend; MemoryRunStore has only the
storage.

The stores of the backend the gateway composed (gateway/composition.py) are opened by name here: the file
backend's are declared here (`switchyard_stores`, through orchestrator/plugin.py), PostgreSQL's by
orchestrator/storage/postgres/plugin.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from gateway.stores import AUDIT, StoreKey

if TYPE_CHECKING:
    from gateway.backends import Backend
    from gateway.channelkit.pairing import Pairing
    from gateway.home import Home
    from gateway.settings import Settings
    from gateway.stores import Approvals, AuditLog, Locks, StoreFactory, StoreT
    from orchestrator.agents.sessions import ConversationHistory, SessionStore
    from orchestrator.runs.base import RunStoreBase
    from orchestrator.runs.state import RunState
    from orchestrator.schedules.records import ScheduleRecords
    from orchestrator.schedules.reminders import ReminderStore
    from orchestrator.storage.files.reminders import FileReminders
    from orchestrator.storage.files.runs import RunStore
    from orchestrator.storage.files.schedules import FileScheduleRecords
    from orchestrator.storage.files.usage import FileUsageRecords
    from orchestrator.usage.records import UsageRecords

__all__ = ["OrchestratorStores", "RunRecords", "open_stores"]

RUNS: StoreKey[RunStoreBase] = StoreKey("runs")
SESSIONS: StoreKey[SessionStore] = StoreKey("sessions")
HISTORY: StoreKey[ConversationHistory] = StoreKey("history")
SCHEDULES: StoreKey[ScheduleRecords] = StoreKey("schedules")
USAGE: StoreKey[UsageRecords] = StoreKey("usage")
REMINDERS: StoreKey[ReminderStore] = StoreKey("reminders")
"""The orchestrator's stores, by the names its plugins declare them under (`switchyard_stores`)."""


@runtime_checkable
class RunRecords(Protocol):
    """Runs, their events, the conversation → active run association and cancel requests."""

    shared: bool
    """True: other hosts' processes see these runs, and claims come from `queued` and `running_ids`."""

    def create(self, run: RunState, key: str | None, *, durable: bool = True) -> RunState:
        """Stores a new run (stamping `updatedAt`) with its `run.created` event; given its conversation's
        `key`, makes it the conversation's active run."""

    def save(self, run: RunState, *, durable: bool = True) -> RunState:
        """Writes the run, stamping `updatedAt`; returns what was written."""

    def sync(self, run_id: str) -> None:
        """Makes the run's last write durable."""

    def load(self, run_id: str) -> RunState | None:
        """The run with this id, or None (also for one that cannot be read: logged)."""

    def read(self, run_id: str) -> RunState | None:
        """`load`, raising for a stored run that cannot be read where the store tells (UnreadableRun)."""

    def quarantine(self, run_id: str, reason: str) -> RunState | None:
        """Ends a stored run that is not one, keeping its data; returns what stands in for it, if any."""

    def unreadable(self) -> list[tuple[str, str]]:
        """(run id, what is wrong) of stored runs that are not runs (left out of every listing)."""

    def transient(self, exc: BaseException) -> bool:
        """Whether a failure reading or writing a run is this host's trouble, tried again later."""

    def append_event(self, run_id: str, event: str, **fields: Any) -> None:
        """Adds one event to the run's events (stored at the latest by its next write or `close_events`)."""

    def close_events(self, run_id: str | None = None) -> None:
        """Stores the events still held for a run (None: for every run)."""

    def events(self, run_id: str, limit: int = 20) -> list[dict[str, Any]]:
        """The last `limit` stored events of a run, oldest first."""

    def set_active(self, key: str, run_id: str) -> None:
        """Associates a conversation with a run."""

    def active_runs(self) -> dict[str, str]:
        """The conversation key → run id association (an ended run's entry may linger: see active_for)."""

    def restore_active(self, unfinished: list[RunState]) -> None:
        """At start: drops ended runs' entries and points each conversation without an unfinished run at its
        newest unfinished run."""

    def active_for(self, key: str) -> RunState | None:
        """The unfinished run associated with a conversation, if any."""

    def last_for(self, key: str) -> RunState | None:
        """The conversation's newest run, finished or not."""

    def all_runs(self) -> list[RunState]:
        """Every readable run, oldest first."""

    def recent(self, limit: int) -> list[RunState]:
        """The `limit` runs changed last, newest first."""

    def unfinished(self) -> list[RunState]:
        """Runs not yet in a final state, oldest first."""

    def needing_recovery(self) -> list[RunState]:
        """Runs a restart looks at: unfinished, or finished with their result not yet delivered."""

    def finished_before(self, cutoff: datetime) -> list[RunState]:
        """Finished runs that ended before `cutoff` (retention)."""

    def queued(self, limit: int) -> list[tuple[str, str | None]] | None:
        """(run id, next_retry_at) of queued runs to claim, due first; None where claims come from
        elsewhere (the file store: coordination/work_queue.json)."""

    def running_ids(self) -> list[str] | None:
        """Runs marked running by any process; None where the store does not know (the file store)."""

    def remove(self, run_id: str) -> bool:
        """Deletes a run and its events; False when it was gone already."""

    def request_cancel(self, run_id: str) -> None:
        """Asks whichever process executes the run to cancel it."""

    def cancel_requests(self, run_ids: Iterable[str]) -> set[str]:
        """Which of these runs were asked to cancel."""

    def clear_cancel(self, run_id: str) -> None:
        """Forgets a run's cancel request."""


@dataclass(frozen=True)
class OrchestratorStores:
    """Every store the Orchestrator uses, opened from the backend the gateway composed (`open_stores`)."""

    runs: RunStoreBase
    sessions: SessionStore
    history: ConversationHistory
    approvals: Approvals
    pairing: Pairing
    locks: Locks
    """The job locks of runs, with the queue's `lock_ttl_sec`."""
    usage: UsageRecords | None = None
    """None where no plugin declares usage totals for the backend (no limits are counted)."""
    schedules: ScheduleRecords | None = None
    """None where no plugin declares schedule records for the backend (no prompt is scheduled)."""
    audit: AuditLog | None = None
    """The audit log of privileged actions (gateway.stores.AUDIT); None where no plugin declares it."""
    reminders: ReminderStore | None = None
    """The reminders made in chat (orchestrator/schedules/reminders.py); None where no plugin declares them."""


def open_stores(backend: Backend) -> OrchestratorStores:
    """The orchestrator's stores on `backend` (orchestrator/plugin.py builds the Orchestrator with them)."""
    return OrchestratorStores(
        runs=open_run_store(backend), sessions=open_sessions(backend), history=open_history(backend),
        approvals=backend.approvals(), pairing=backend.pairing(),
        locks=backend.locks(ttl_s=backend.settings.queue.lock_ttl_sec),
        usage=open_usage(backend), schedules=open_schedules(backend), audit=_declared(backend, AUDIT),
        reminders=open_reminders(backend))


def backend_for(home: Home, settings: Settings) -> Backend:
    """The backend `settings` configure (for a command or a hook that is given no backend)."""
    from gateway.composition import open_backend

    return open_backend(home, settings)


def open_run_store(backend: Backend, *, fsync: bool | None = None) -> RunStoreBase:
    """The backend's run store; `fsync` defaults to `queue.fsync`."""
    return backend.store(RUNS, fsync=backend.settings.queue.fsync if fsync is None else fsync)


def open_sessions(backend: Backend) -> SessionStore:
    """The backend's provider sessions."""
    return backend.store(SESSIONS)


def open_history(backend: Backend) -> ConversationHistory:
    """The backend's conversation history."""
    return backend.store(HISTORY)


def open_schedules(backend: Backend) -> ScheduleRecords | None:
    """The backend's schedule records (orchestrator/schedules/records.py), or None where no plugin declares them."""
    return _declared(backend, SCHEDULES)


def open_reminders(backend: Backend) -> ReminderStore | None:
    """The backend's reminders (orchestrator/schedules/reminders.py), or None where no plugin declares them."""
    return _declared(backend, REMINDERS)


def open_usage(backend: Backend) -> UsageRecords | None:
    """The backend's usage totals (orchestrator/usage/records.py), or None where no plugin declares them."""
    return _declared(backend, USAGE)


def _declared(backend: Backend, key: StoreKey[StoreT]) -> StoreT | None:
    """The backend's store `key`, or None where no plugin declares it for this backend."""
    try:
        return backend.store(key)
    except KeyError:
        return None


def file_stores() -> dict[str, dict[str, StoreFactory]]:
    """The orchestrator's stores on the file backend: folders under runs/ and files in state/."""
    return {RUNS.name: {"files": _runs}, SESSIONS.name: {"files": _sessions}, HISTORY.name: {"files": _history},
            SCHEDULES.name: {"files": _schedules}, USAGE.name: {"files": _usage},
            REMINDERS.name: {"files": _reminders}}


def _usage(backend: Backend, *, holder: str | None = None) -> FileUsageRecords:
    from orchestrator.storage.files.usage import FileUsageRecords

    return FileUsageRecords(backend.home, holder=holder)


def _schedules(backend: Backend) -> FileScheduleRecords:
    from orchestrator.storage.files.schedules import FileScheduleRecords

    return FileScheduleRecords(backend.home, fsync=backend.settings.queue.fsync)


def _reminders(backend: Backend) -> FileReminders:
    from orchestrator.storage.files.reminders import FileReminders

    return FileReminders(backend.home, fsync=backend.settings.queue.fsync)


def _runs(backend: Backend, *, fsync: bool) -> RunStore:
    from orchestrator.storage.files.runs import RunStore

    return RunStore(backend.home, fsync=fsync)


def _sessions(backend: Backend) -> SessionStore:
    from orchestrator.agents.sessions import FileRecords, SessionStore

    return SessionStore(FileRecords(backend.home.root / "sessions", fsync=True))


def _history(backend: Backend) -> ConversationHistory:
    from orchestrator.agents.sessions import ConversationHistory, FileRecords

    return ConversationHistory(FileRecords(backend.home.root / "sessions" / "history", fsync=False))
