"""What every run store does: the interface the orchestrator uses, and the logic written once above storage
(the transition table, step changes, a run's local folder). The file store
(orchestrator.storage.files.runs.RunStore) and
the database's (orchestrator.storage.postgres.runs.PgRunStore) supply the storage."""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
from abc import ABC, abstractmethod
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from gateway.disk.locks import pid_alive
from gateway.home import Home, safe_name
from orchestrator.runs.jobs import JobState, check_transition
from orchestrator.runs.listing import select_runs
from orchestrator.runs.state import RunState, stored_conversation_key

JOB_LOCK_PREFIX = "job:"  # the coordination lock of a run being executed (or reserved): `job:<run id>`
MADE_FOLDERS = 4096  # folders remembered as existing
REMOVING_PREFIX = ".removing-"  # a run folder being deleted (hidden: not a valid run id)
SPARE_DIR = ".spare"  # under runs/: emptied run folders a process keeps for its next runs (`<pid>-<n>`)
SPARE_FOLDERS = 8  # kept per process at most
LAST_RUN_LOOKBACK = 500  # `last_for` looks for a conversation's newest run among this many runs changed last


class RunStoreBase(ABC):
    """Reads and writes runs; every state change goes through the transition table.

    Each run has a folder under `runs/` on the host executing its steps, made only when a step uses it
    (a provider's workspace, an output kept as a file, a request file).
    """

    shared = False  # True: the runs are seen by processes on other hosts (claims come from the store)

    def __init__(self, home: Home, *, fsync: bool = True):
        self._root = home.runs
        self._fsync = fsync
        self._made: set[Path] = set()  # folders known to exist: a run's folders are made once
        self._spares: list[Path] = []  # emptied run folders of this process, for its next runs

    def folder(self, run_id: str) -> Path:
        """The folder of one run (its workspace, outputs kept as files, request files)."""
        return self._root / safe_name(run_id)

    def made(self, folder: Path) -> Path:
        """`folder`, created (with its parents) the first time this store needs it; a run's folder is an
        emptied one of a run removed before when there is one (see `remove_folder`)."""
        if folder not in self._made:
            if folder.parent != self._root or not self._reused(folder):
                folder.mkdir(parents=True, exist_ok=True)
            if len(self._made) >= MADE_FOLDERS:  # bounded: forgetting one costs a mkdir, not a failure
                self._made.clear()
            self._made.add(folder)
        return folder

    def remove_folder(self, run_id: str) -> bool:
        """Deletes a run's folder (renamed to a hidden name first, so a half-deleted folder is never read
        as a run); False when it was gone already. Emptied, the folder itself is kept for a next run
        (runs/.spare/): on ext4 a folder created soon after others were deleted costs up to a few hundred
        µs, and a chat message made and deleted two (with its `workspace/`). Only the folder and an empty
        `workspace/` are reused, never a file, and every reader reaches a run's files by their path: nothing
        of the old run can be read through it."""
        folder = self.folder(run_id)
        spare = self._root / SPARE_DIR / f"{os.getpid()}-{next(_SPARE_NAMES)}"
        hidden = spare if len(self._spares) < SPARE_FOLDERS else folder.with_name(REMOVING_PREFIX + folder.name)
        try:
            os.rename(folder, hidden)
        except FileNotFoundError:
            if hidden != spare or not folder.exists():
                return False  # removed meanwhile by another process sharing the home
            spare.parent.mkdir(exist_ok=True)  # the home's first spare
            try:
                os.rename(folder, hidden)
            except FileNotFoundError:
                return False
        if hidden == spare and _emptied(spare):
            self._spares.append(spare)
        else:
            shutil.rmtree(hidden, ignore_errors=True)
        inside = str(folder) + os.sep  # its workspace/ and outputs/ too (a string test: is_relative_to raises)
        self._made = {made for made in self._made if made != folder and not str(made).startswith(inside)}
        return True

    # --- state changes, written once for every store --------------------------------------------------

    def transition(self, run: RunState, state: JobState, *, save: bool = True, durable: bool = True,
                   **changes: Any) -> RunState:
        """Moves a run to `state` (raising IllegalTransition if the table forbids it) and saves it
        (`save=False`: the caller saves it, with what else changes at the same boundary)."""
        check_transition(run.runId, run.state, state)
        run = run.model_copy(update={"state": state, **changes})
        if run.finished:
            self._ended(run.runId)
        if save:
            return self._save_with_event(run, durable, "run.state", state=state, error=changes.get("error"))
        self.append_event(run.runId, "run.state", state=state, error=changes.get("error"))
        return run

    def update_step(self, run: RunState, step_id: str, *, save: bool = True, durable: bool = True,
                    **fields: Any) -> RunState:
        """Changes fields of one step and saves the run (`save=False`: the caller saves it)."""
        step = run.steps[step_id].model_copy(update=fields)
        steps = {**run.steps, step_id: step}
        changes: dict[str, Any] = {"steps": steps}
        if fields.get("status") in ("running", "waiting"):
            changes["currentStep"] = step_id
        run = run.model_copy(update=changes)
        if "status" not in fields:
            return self.save(run, durable=durable) if save else run
        event, details = "step." + str(step.status), {"step": step_id, "exitCode": step.exitCode}
        if save:
            return self._save_with_event(run, durable, event, **details)
        self.append_event(run.runId, event, **details)
        return run

    def _reused(self, folder: Path) -> bool:
        """Moves a spare folder to `folder`; False when there is none (or `folder` exists with files)."""
        while self._spares:
            spare = self._spares.pop()
            try:
                os.rename(spare, folder)
                return True
            except FileNotFoundError:
                continue  # removed by a start-up's clean-up of a process it took for dead
            except OSError:
                self._spares.append(spare)
                return False
        return False

    def drop_spares(self) -> None:
        """Removes this process's spare folders (when it stops: they serve only its next runs)."""
        spares, self._spares = self._spares, []
        for spare in spares:
            shutil.rmtree(spare, ignore_errors=True)

    def drop_dead_spares(self) -> None:
        """Removes the spare folders processes that are gone left (at start)."""
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self._root / SPARE_DIR):
                pid = entry.name.split("-", 1)[0]
                if not (pid.isdigit() and pid_alive(int(pid))):
                    shutil.rmtree(entry.path, ignore_errors=True)

    def _ended(self, run_id: str) -> None:
        """Hears that a run reached a final state (before it is saved)."""
        return None

    def _save_with_event(self, run: RunState, durable: bool, event: str, **fields: Any) -> RunState:
        """Saves the run, then appends the event that says what changed."""
        run = self.save(run, durable=durable)
        self.append_event(run.runId, event, **fields)
        return run

    def newest(self, limit: int, *, since: datetime | None = None, states: set[str] | None = None,
               active: bool = False) -> tuple[list[RunState], int]:
        """The runs `switchyard runs` lists: newest first, cut to `limit` (0: all), and how many matched."""
        return select_runs(self.unfinished() if active else self.all_runs(), since=since, states=states,
                           limit=limit)

    def last_for(self, key: str) -> RunState | None:
        """The conversation's newest run, finished or not (its `/status` after the run ended); None when
        none is among the LAST_RUN_LOOKBACK runs changed last (a store that indexes its runs by conversation
        looks at them all)."""
        runs = [run for run in self.recent(LAST_RUN_LOOKBACK) if stored_conversation_key(run.message) == key]
        return max(runs, key=lambda run: (run.createdAt, run.runId), default=None)

    def stored_at(self, run_id: str) -> str:
        """Where `runs show` says the run's state is."""
        return "the database" if self.shared else str(self.folder(run_id) / "state.json")

    def settle(self, run: RunState) -> bool:
        """Hears that a finished run's result was handed over: nothing will change it any more. True when
        the store now keeps the run whole as given (the file store's archive line), so it need not have
        been written in its final state before."""
        return False

    def settles_whole(self, run_id: str) -> bool:
        """Whether `settle` would keep this run whole now (its final state need not be written before)."""
        return False

    def tidy(self) -> None:
        """At start: completes what a crash left half done in keeping finished runs."""
        self.drop_dead_spares()

    def prune_settled(self, cutoff: datetime) -> list[str]:
        """Removes settled runs that ended before `cutoff` and `finished_before` does not list; their ids."""
        return []

    # --- storage: what each store supplies --------------------------------------------------------------

    @abstractmethod
    def load(self, run_id: str) -> RunState | None:
        """The run with this id, or None when there is none, it cannot be read (logged), or the id is not
        a valid name."""

    @abstractmethod
    def read(self, run_id: str) -> RunState | None:
        """`load`, raising for a stored state that is not a run (the file store's UnreadableRun)."""

    @abstractmethod
    def quarantine(self, run_id: str, reason: str) -> RunState | None:
        """Ends a run whose stored state is not a run; the stand-in, if the store keeps one."""

    @abstractmethod
    def transient(self, exc: BaseException) -> bool:
        """Whether a failure reading or writing a run is this host's trouble rather than that run's."""

    @abstractmethod
    def save(self, run: RunState, *, durable: bool = True) -> RunState:
        """Writes the run, stamping `updatedAt`; returns what was written."""

    @abstractmethod
    def create(self, run: RunState, key: str | None, *, durable: bool = True) -> RunState:
        """Stores a new run and, given its conversation's `key`, makes it the conversation's active run."""

    @abstractmethod
    def sync(self, run_id: str) -> None:
        """Makes the run's last write durable."""

    @abstractmethod
    def append_event(self, run_id: str, event: str, **fields: Any) -> None:
        """Records one event of a run."""

    @abstractmethod
    def close_events(self, run_id: str | None = None) -> None:
        """Finishes writing the events of a run (None: of every run)."""

    @abstractmethod
    def events(self, run_id: str, limit: int = 20) -> list[dict[str, Any]]:
        """The last `limit` events of a run, oldest first."""

    @abstractmethod
    def active_runs(self) -> dict[str, str]:
        """The conversation key → run id association."""

    @abstractmethod
    def active_for(self, key: str) -> RunState | None:
        """The unfinished run associated with a conversation, if any."""

    @abstractmethod
    def set_active(self, key: str, run_id: str) -> None:
        """Associates a conversation with a run."""

    @abstractmethod
    def restore_active(self, unfinished: list[RunState]) -> None:
        """At start: points each conversation at its newest unfinished run."""

    @abstractmethod
    def all_runs(self) -> list[RunState]:
        """Every readable run, oldest first."""

    @abstractmethod
    def unreadable(self) -> list[tuple[str, str]]:
        """(run id, what is wrong) of every stored run that is not one."""

    @abstractmethod
    def recent(self, limit: int) -> list[RunState]:
        """The `limit` runs changed last, newest first."""

    @abstractmethod
    def unfinished(self) -> list[RunState]:
        """Runs not yet in a final state, oldest first."""

    @abstractmethod
    def needing_recovery(self) -> list[RunState]:
        """Runs a restart looks at: unfinished, or finished with their result not yet delivered."""

    @abstractmethod
    def finished_before(self, cutoff: datetime) -> list[RunState]:
        """Finished runs that ended before `cutoff` (removed one by one by the retention)."""

    @abstractmethod
    def remove(self, run_id: str) -> bool:
        """Deletes a run; False when it was gone already."""

    @abstractmethod
    def queued(self, limit: int) -> list[tuple[str, str | None]] | None:
        """(run id, next_retry_at) of queued runs to claim, due first; None: the store does not say."""

    @abstractmethod
    def running_ids(self) -> list[str] | None:
        """Runs marked running by any process; None: the store does not say."""

    @abstractmethod
    def request_cancel(self, run_id: str) -> None:
        """Asks the process executing the run to cancel it."""

    @abstractmethod
    def cancel_requests(self, run_ids: Iterable[str]) -> set[str]:
        """Which of these runs another process asked to cancel."""

    @abstractmethod
    def clear_cancel(self, run_id: str) -> None:
        """Forgets a run's cancel request (it was carried out)."""


_SPARE_NAMES = itertools.count()


def _emptied(folder: Path) -> bool:
    """Empties a run folder of its files and empty folders but `workspace/` (kept for the next run's process,
    empty); False when a folder in it holds anything (or the disk refused)."""
    try:
        for entry in list(os.scandir(folder)):
            if not entry.is_dir(follow_symlinks=False):
                os.unlink(entry.path)
            elif entry.name != "workspace":
                os.rmdir(entry.path)
            elif os.listdir(entry.path):
                return False
    except OSError:
        return False
    return True
