"""The file run store: `runs/<runId>/state.json` and events while a run goes on, the archive once it settled,
active runs."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gateway.home import Home, atomic_write, fsync_dir, safe_name
from gateway.storable import made_safe, storable
from gateway.telemetry.events import utc_now_iso
from orchestrator.runs.base import RunStoreBase
from orchestrator.runs.listing import select_runs
from orchestrator.runs.state import (
    RunState,
    UnreadableRun,
    conversation_key,
    finished_at,
    storable_state,
    unreadable_stand_in,
)
from orchestrator.storage.files.active import ActiveFile
from orchestrator.storage.files.runarchive import Entry
from orchestrator.storage.files.settled import CANCEL_MARKER, SettledRuns, created_at, event_lines, line_holds

log = logging.getLogger("switchyard.orchestrator.runs")

EVENT_TAIL_BYTES = 8192
OPEN_EVENT_FILES = 64  # per-run events.jsonl kept open at once (runs in progress, oldest closed first)


class RunStore(RunStoreBase):
    """Reads and writes runs on disk; every state change goes through the transition table.

    A run lives in its folder while it goes on. Once it settled (finished, its result handed over), a run
    whose folder holds nothing but its state and events (a chat reply: no workspace used, no output kept
    as a file, no request file) becomes one line of the archive (orchestrator.storage.files.runarchive) and its folder
    goes: a chat message leaves no folder behind. A run that keeps files stays a folder.

    Durability: `save` fsyncs state.json by default; the lifecycle saves without fsync (`durable=False`)
    only where losing the write in a power cut merely makes a step run again (see Lifecycle). The
    active-run index (`runs/active.json`) is never fsynced: it is rebuilt from the runs' own state
    at start (`restore_active`).

    The processes sharing the home see its runs; orchestrator.storage.postgres.runs.PgRunStore keeps them in the
    database for every host (`shared`), with the same interface.
    """

    def __init__(self, home: Home, *, fsync: bool = True):
        super().__init__(home, fsync=fsync)
        self._settled = SettledRuns(self._root, fsync=fsync)
        self._event_fds: OrderedDict[str, int] = OrderedDict()
        self._listed: set[str] = set()  # runs this store made active, until they end
        self._active = ActiveFile(self._root, self.made)

    @property
    def active_file(self) -> Path:
        """`runs/active.json`: which run is active in which conversation."""
        return self._active.path

    def load(self, run_id: str) -> RunState | None:
        """The run with this id, or None when there is none, it cannot be read (logged), or the id is not
        a valid name."""
        try:
            return self.read(run_id)
        except (OSError, UnreadableRun) as exc:
            log.error("cannot read run %s: %s", run_id, exc)
            return None

    def read(self, run_id: str) -> RunState | None:
        """`load`, raising UnreadableRun for a stored state that is not a run, OSError when the disk refuses."""
        if safe_name(run_id) != run_id:
            return None
        run = self._read_folder(run_id)
        return run if run is not None else self._settled.get(run_id)

    def _read_folder(self, run_id: str) -> RunState | None:
        """The run of a folder (None: no folder holds it; then it settled, or it never was)."""
        path = self.folder(run_id) / "state.json"
        try:
            return RunState.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            return None
        except ValidationError as exc:
            raise UnreadableRun(f"its state.json is not a run: {_first_error(exc)}") from None

    def quarantine(self, run_id: str, reason: str) -> RunState | None:
        """Ends a run whose state.json is not a run: its bytes are kept (`state.json.unreadable-<ns>`) and a
        failed_final stand-in saying `reason` takes its place, so no claim or listing stops at it again and
        `runs show` says what happened. Returns the stand-in (None: the run is gone)."""
        folder = self.folder(run_id)
        try:
            raw = (folder / "state.json").read_bytes()
        except FileNotFoundError:
            return None
        kept = folder / f"state.json.unreadable-{time.time_ns()}"
        try:
            os.link(folder / "state.json", kept)  # the same bytes under a second name, never rewritten
        except OSError:
            atomic_write(kept, raw, fsync=self._fsync)
        run = unreadable_stand_in(run_id, raw, f"{reason} (its bytes are kept in {kept.name})")
        return self._save_with_event(run, True, "run.state", state=run.state, error=run.error)

    def transient(self, exc: BaseException) -> bool:
        """Whether a failure reading or writing a run is this host's trouble, tried again later (a full
        or failing disk), rather than that run's."""
        return isinstance(exc, OSError)

    def save(self, run: RunState, *, durable: bool = True) -> RunState:
        """Writes state.json atomically, stamping `updatedAt`; fsynced unless `durable` is False. A NUL or a
        lone surrogate (in a step's output, say) is written as U+FFFD (gateway.storable), as the database
        store does, and the run returned holds what was written."""
        run, data = storable_state(run.model_copy(update={"updatedAt": utc_now_iso()}))
        folder = self.made(self.folder(run.runId))
        atomic_write(folder / "state.json", data, fsync=self._fsync and durable)
        return run

    def create(self, run: RunState, key: str | None, *, durable: bool = True) -> RunState:
        """Stores a new run and, given its conversation's `key`, makes it the conversation's active run."""
        run = self._save_with_event(run, durable, "run.created", workflowId=run.workflowId)
        if key is not None:
            self.set_active(key, run.runId)
        return run

    def sync(self, run_id: str) -> None:
        """Makes the run's last write of state.json durable (fsync of the file and its folder)."""
        if not self._fsync:
            return
        folder = self.folder(run_id)
        fd = os.open(folder / "state.json", os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(folder)

    def _ended(self, run_id: str) -> None:
        if run_id in self._listed:
            self._listed.discard(run_id)
            self._active.ended(run_id)

    def append_event(self, run_id: str, event: str, **fields: Any) -> None:
        """Appends one line to the run's events.jsonl (opened once while the run goes on)."""
        record = {"ts": utc_now_iso(), "event": event, **{k: v for k, v in fields.items() if v is not None}}
        text = json.dumps(record, ensure_ascii=False, default=str)
        if not storable(text):  # an error's text may quote a NUL or a lone surrogate: U+FFFD
            text = json.dumps(made_safe(json.loads(text)), ensure_ascii=False)
        line = (text + "\n").encode()
        fd = self._event_fds.get(run_id)
        if fd is None:
            path = self.made(self.folder(run_id)) / "events.jsonl"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            self._event_fds[run_id] = fd
            if len(self._event_fds) > OPEN_EVENT_FILES:
                os.close(self._event_fds.popitem(last=False)[1])
        os.write(fd, line)

    def close_events(self, run_id: str | None = None) -> None:
        """Closes the events file of a run (None: of every run), e.g. when it ended."""
        for key in [run_id] if run_id is not None else list(self._event_fds):
            fd = self._event_fds.pop(key, None)
            if fd is not None:
                os.close(fd)

    def events(self, run_id: str, limit: int = 20) -> list[dict[str, Any]]:
        """The last `limit` events of a run (from the tail of its events.jsonl, or its archived line)."""
        path = self.folder(run_id) / "events.jsonl"
        try:
            with path.open("rb") as handle:
                handle.seek(max(0, path.stat().st_size - EVENT_TAIL_BYTES * max(1, limit // 10)))
                lines = handle.read().splitlines()
        except FileNotFoundError:
            return self._settled.events(run_id, limit) if safe_name(run_id) == run_id else []
        found = []
        for raw in lines[-limit:]:
            with contextlib.suppress(ValueError):
                found.append(json.loads(raw))
        return found

    def active_runs(self) -> dict[str, str]:
        """The conversation key → run id association. A run's entry is not removed when it ends (that
        would be a second write per run): `active_for` checks the run, and the next write drops the
        entries of runs this process saw end."""
        return self._active.read()

    def active_for(self, key: str) -> RunState | None:
        """The unfinished run associated with a conversation, if any."""
        run_id = self.active_runs().get(key)
        run = self._load_folder(run_id) if run_id else None  # a settled run is finished: never looked for
        return run if run is not None and not run.finished else None

    def set_active(self, key: str, run_id: str) -> None:
        """Associates a conversation with a run (not fsynced: `restore_active` rebuilds what a power cut
        loses, from the runs' state files)."""
        with self._active.locked():
            self._active.write({**self.active_runs(), key: run_id})
        self._listed.add(run_id)

    def restore_active(self, unfinished: list[RunState]) -> None:
        """At start: drops the entries of ended runs and points each conversation whose entry names no
        unfinished run at its newest unfinished run."""
        newest: dict[str, str] = {}
        for run in unfinished:  # oldest first: the newest wins
            with contextlib.suppress(ValidationError):  # its message is not one: it ends at its claim
                newest[conversation_key(run.payload())] = run.runId
        open_ids = {run.runId for run in unfinished}
        if not newest and not self.active_runs():
            return
        with self._active.locked():
            active = self.active_runs()
            kept = {k: v for k, v in active.items() if v in open_ids or not _ended(self._load_folder(v))}
            restored = {**kept, **{k: v for k, v in newest.items() if kept.get(k) not in open_ids}}
            if restored != active:
                self._active.write(restored)
        self._listed.update(run_id for run_id in restored.values() if run_id in open_ids)

    def _load_folder(self, run_id: str) -> RunState | None:
        try:
            return self._read_folder(run_id) if safe_name(run_id) == run_id else None
        except (OSError, UnreadableRun) as exc:
            log.error("cannot read run %s: %s", run_id, exc)
            return None

    def _folder_runs(self) -> list[RunState]:
        """Every readable run that has a folder (going on, keeping files, or not yet archived)."""
        if not self._root.is_dir():
            return []
        return [run for p in self._root.iterdir() if (p / "state.json").is_file()
                and (run := self._load_folder(p.name)) is not None]

    def all_runs(self) -> list[RunState]:
        """Every readable run, oldest first (the archive's read whole)."""
        runs = {run.runId: run for run in self._settled.newest(0, lambda entry: True)[0]}
        runs.update((run.runId, run) for run in self._folder_runs())
        return sorted(runs.values(), key=lambda r: (r.createdAt, r.runId))

    def unreadable(self) -> list[tuple[str, str]]:
        """(run id, what is wrong) of every stored run that is not one (`all_runs` leaves them out)."""
        found = []
        for entry in os.scandir(self._root) if self._root.is_dir() else ():
            try:
                self._read_folder(entry.name) if safe_name(entry.name) == entry.name else None
            except UnreadableRun as exc:
                found.append((entry.name, str(exc)))
            except OSError:
                continue
        return found

    def recent(self, limit: int) -> list[RunState]:
        """The `limit` runs changed last, newest first (folders by state.json's mtime, the archive from the
        end of its index: never every run)."""
        stamped = []
        for entry in os.scandir(self._root) if self._root.is_dir() else ():
            with contextlib.suppress(OSError):
                stamped.append((os.stat(os.path.join(entry.path, "state.json")).st_mtime, entry.name))
        runs = [run for _, name in sorted(stamped, reverse=True)[:limit] if (run := self._load_folder(name))]
        ids = {run.runId for run in runs}
        runs += self._settled.changed_last(limit, lambda entry: entry.run_id not in ids)
        return sorted(runs, key=lambda r: (r.updatedAt, r.runId), reverse=True)[:limit]

    def newest(self, limit: int, *, since: datetime | None = None, states: set[str] | None = None,
               active: bool = False) -> tuple[list[RunState], int]:
        """The runs `switchyard runs` lists, newest first, and how many matched: the folders' runs and the
        newest of the archive, read from the ends of its indexes (counted from their sizes)."""
        limit = max(limit, 0)
        folder_runs = self.unfinished() if active else self._folder_runs()
        chosen, matched = select_runs(folder_runs, since=since, states=states, limit=limit)
        if active:
            return chosen, matched
        ids = {run.runId for run in folder_runs}

        def keep(entry: Entry) -> bool:
            return entry.run_id not in ids and (not states or entry.state in states) and (
                since is None or created_at(entry.created) >= since)
        settled, counted = self._settled.newest(limit, keep, since)
        if counted is None and not states and since is None:  # every one kept: the indexes' sizes say
            counted = self._settled.count() - sum(1 for run in folder_runs if run.finished and run.delivery
                                                  and self.settles_whole(run.runId)  # a crash's leftover
                                                  and self._settled.holds(run.runId))
        elif counted is None:
            counted = self._settled.newest(0, keep, since)[1]
        runs, _ = select_runs([*chosen, *settled], limit=limit)
        return runs, matched + (counted or 0)

    def unfinished(self) -> list[RunState]:
        """Runs not yet in a final state, oldest first (folders only: an archived run is finished)."""
        return sorted((run for run in self._folder_runs() if not run.finished), key=lambda r: (r.createdAt, r.runId))

    def needing_recovery(self) -> list[RunState]:
        """Runs a restart looks at: unfinished, or finished with their result not yet delivered."""
        runs = (run for run in self._folder_runs() if not (run.finished and run.delivery is not None))
        return sorted(runs, key=lambda r: (r.createdAt, r.runId))

    def finished_before(self, cutoff: datetime) -> list[RunState]:
        """Finished runs with a folder that ended (their job's finished_at, else their last update) before
        `cutoff`; the archive's go by whole days (`prune_settled`)."""
        return sorted((run for run in self._folder_runs() if run.finished and (ended := finished_at(run))
                       and ended < cutoff), key=lambda r: (r.createdAt, r.runId))

    def remove(self, run_id: str) -> bool:
        """Deletes a run's folder (an archived run goes with its day: `prune_settled`)."""
        return self.remove_folder(run_id)

    # --- the archive ---------------------------------------------------------------------------------

    def settle(self, run: RunState) -> bool:
        """Archives a finished run whose result was handed over, when its folder holds nothing but its state
        and events: one line written (fsynced when the store fsyncs) before the folder goes. True when it
        was archived."""
        if not run.finished or run.delivery is None or not self.settles_whole(run.runId):
            return False
        self.close_events(run.runId)
        events = event_lines(self.folder(run.runId) / "events.jsonl")
        self._settled.add(run, storable_state(run, indent=None)[1], events)
        self.remove_folder(run.runId)
        return True

    def settles_whole(self, run_id: str) -> bool:
        return line_holds(self.folder(run_id))

    def stored_at(self, run_id: str) -> str:
        """The run's state.json, or for a settled run the archive's log holding its line."""
        state = self.folder(run_id) / "state.json"
        log_file = None if state.exists() else self._settled.log_of(run_id)
        return str(log_file or state)

    def tidy(self) -> None:
        """Archives the settled runs a crash left in their folders (removing the folder of one archived
        already), and drops the spare folders of processes that are gone."""
        super().tidy()
        for run in self._folder_runs():
            if run.finished and run.delivery is not None and self.settles_whole(run.runId):
                if self._settled.holds(run.runId):
                    self.remove_folder(run.runId)
                else:
                    self.settle(run)

    def prune_settled(self, cutoff: datetime) -> list[str]:
        """Removes the archive's days whose runs were all archived before `cutoff`; their run ids."""
        return self._settled.prune(cutoff)

    def queued(self, limit: int) -> list[tuple[str, str | None]] | None:
        """(run id, next_retry_at) of queued runs to claim, due first; None here: the processes of one
        home find them in coordination/work_queue.json."""
        return None

    def running_ids(self) -> list[str] | None:
        """Runs marked running by any process; None here: coordination/active_work.json lists them."""
        return None

    # --- cancel requests from another process -----------------------------------------------------

    def request_cancel(self, run_id: str) -> None:
        """Asks the process executing the run to cancel it (a marker file in the run's folder)."""
        (self.made(self.folder(run_id)) / CANCEL_MARKER).write_text(f"{os.getpid()}\n", encoding="utf-8")

    def cancel_requests(self, run_ids: Iterable[str]) -> set[str]:
        """Which of these runs another process asked to cancel."""
        return {run_id for run_id in run_ids if (self.folder(run_id) / CANCEL_MARKER).exists()}

    def clear_cancel(self, run_id: str) -> None:
        """Forgets a run's cancel request (it was carried out)."""
        (self.folder(run_id) / CANCEL_MARKER).unlink(missing_ok=True)


def _first_error(exc: ValidationError) -> str:
    """The first problem pydantic found, in one line."""
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error.get("loc", ()))
    return f"{error.get('msg', 'invalid')}" + (f" at {where}" if where else "")


def _ended(run: RunState | None) -> bool:
    """True for a run that ended or is gone."""
    return run is None or run.finished
