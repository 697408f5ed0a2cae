"""The run store: `runs/<runId>/state.json`, per-run events, the transition table, active runs."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from gateway.events import utc_now_iso
from gateway.home import Home, atomic_write, fsync_dir, safe_name
from gateway.storable import made_safe, storable
from orchestrator.jobs import JobState, check_transition
from orchestrator.runstate import RunState, conversation_key, finished_at, unreadable_stand_in

log = logging.getLogger("switchyard.orchestrator.runs")

EVENT_TAIL_BYTES = 8192
MADE_FOLDERS = 4096  # folders remembered as existing
OPEN_EVENT_FILES = 64  # per-run events.jsonl kept open at once (runs in progress, oldest closed first)
CANCEL_MARKER = "cancel.request"  # a run folder's cancel request from another process sharing the home
REMOVING_PREFIX = ".removing-"  # a run folder being deleted (hidden: not a valid run id)


class UnreadableRun(Exception):
    """A stored run that is not one (a corrupt or hand-edited state): what is wrong with it."""


class RunStore:
    """Reads and writes runs on disk; every state change goes through the transition table.

    Durability: `save` fsyncs state.json by default; the lifecycle saves without fsync (`durable=False`)
    only where losing the write in a power cut merely makes a step run again (see Lifecycle). The
    active-run index (`runs/active.json`) is never fsynced: it is rebuilt from the runs' own state
    at start (`restore_active`).

    The processes sharing the home see its runs; orchestrator.pg.runs.PgRunStore keeps them in the
    database for every host (`shared`), with the same interface.
    """

    shared = False  # True: the runs are seen by processes on other hosts (claims come from the store)

    def __init__(self, home: Home, *, fsync: bool = True):
        self._root = home.runs
        self._fsync = fsync
        self._made: set[Path] = set()  # folders known to exist: a run's folders are made once
        self._event_fds: OrderedDict[str, int] = OrderedDict()
        self._listed: set[str] = set()  # runs this store made active, until they end
        self._ended: set[str] = set()  # those that ended since active.json was last written

    @property
    def active_file(self) -> Path:
        """`runs/active.json`: which run is active in which conversation."""
        return self._root / "active.json"

    def folder(self, run_id: str) -> Path:
        """The folder of one run (its state, events, request files and workspace)."""
        return self._root / safe_name(run_id)

    def made(self, folder: Path) -> Path:
        """`folder`, created (with its parents) the first time this store needs it."""
        if folder not in self._made:
            folder.mkdir(parents=True, exist_ok=True)
            if len(self._made) >= MADE_FOLDERS:  # bounded: forgetting one costs a mkdir, not a failure
                self._made.clear()
            self._made.add(folder)
        return folder

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
        run, data = _storable_state(run.model_copy(update={"updatedAt": utc_now_iso()}))
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

    def transition(self, run: RunState, state: JobState, *, save: bool = True, durable: bool = True,
                   **changes: Any) -> RunState:
        """Moves a run to `state` (raising IllegalTransition if the table forbids it) and saves it
        (`save=False`: the caller saves it, with what else changes at the same boundary)."""
        check_transition(run.runId, run.state, state)
        run = run.model_copy(update={"state": state, **changes})
        if run.finished and run.runId in self._listed:
            self._listed.discard(run.runId)
            self._ended.add(run.runId)
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

    def _save_with_event(self, run: RunState, durable: bool, event: str, **fields: Any) -> RunState:
        """Saves the run, then appends the event that says what changed."""
        run = self.save(run, durable=durable)
        self.append_event(run.runId, event, **fields)
        return run

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
        """The last `limit` events of a run (from the tail of its events.jsonl)."""
        path = self.folder(run_id) / "events.jsonl"
        try:
            with path.open("rb") as handle:
                handle.seek(max(0, path.stat().st_size - EVENT_TAIL_BYTES * max(1, limit // 10)))
                lines = handle.read().splitlines()
        except FileNotFoundError:
            return []
        found = []
        for raw in lines[-limit:]:
            with contextlib.suppress(ValueError):
                found.append(json.loads(raw))
        return found

    def active_runs(self) -> dict[str, str]:
        """The conversation key → run id association. A run's entry is not removed when it ends (that
        would be a second write per run): `active_for` checks the run, and the next write drops the
        entries of runs this process saw end."""
        try:
            data = json.loads(self.active_file.read_bytes())
        except (FileNotFoundError, ValueError):
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def active_for(self, key: str) -> RunState | None:
        """The unfinished run associated with a conversation, if any."""
        run_id = self.active_runs().get(key)
        run = self.load(run_id) if run_id else None
        return run if run is not None and not run.finished else None

    def set_active(self, key: str, run_id: str) -> None:
        """Associates a conversation with a run (not fsynced: `restore_active` rebuilds what a power cut
        loses, from the runs' state files)."""
        with self._active_lock():
            self._write_active({**self.active_runs(), key: run_id})
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
        with self._active_lock():
            active = self.active_runs()
            kept = {k: v for k, v in active.items() if v in open_ids or not _ended(self.load(v))}
            restored = {**kept, **{k: v for k, v in newest.items() if kept.get(k) not in open_ids}}
            if restored != active:
                self._write_active(restored)
        self._listed.update(run_id for run_id in restored.values() if run_id in open_ids)

    @contextlib.contextmanager
    def _active_lock(self) -> Iterator[None]:
        """Serialises read-modify-write of active.json across processes sharing the home."""
        with (self.made(self._root) / ".active.lock").open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _write_active(self, active: dict[str, str]) -> None:
        ended, self._ended = self._ended, set()
        active = {key: run_id for key, run_id in active.items() if run_id not in ended}
        atomic_write(self.made(self._root) / "active.json", json.dumps(active, indent=2).encode(), fsync=False)

    def all_runs(self) -> list[RunState]:
        """Every readable run, oldest first."""
        if not self._root.is_dir():
            return []
        runs = [self.load(p.name) for p in self._root.iterdir() if (p / "state.json").is_file()]
        return sorted((r for r in runs if r is not None), key=lambda r: (r.createdAt, r.runId))

    def unreadable(self) -> list[tuple[str, str]]:
        """(run id, what is wrong) of every stored run that is not one (`all_runs` leaves them out)."""
        found = []
        for entry in os.scandir(self._root) if self._root.is_dir() else ():
            try:
                self.read(entry.name)
            except UnreadableRun as exc:
                found.append((entry.name, str(exc)))
            except OSError:
                continue
        return found

    def recent(self, limit: int) -> list[RunState]:
        """The `limit` runs changed last, newest first (read by state.json's mtime, not every run)."""
        if not self._root.is_dir():
            return []
        stamped = []
        for entry in os.scandir(self._root):
            with contextlib.suppress(OSError):
                stamped.append((os.stat(os.path.join(entry.path, "state.json")).st_mtime, entry.name))
        runs = (self.load(name) for _, name in sorted(stamped, reverse=True)[:limit])
        return [run for run in runs if run is not None]

    def unfinished(self) -> list[RunState]:
        """Runs not yet in a final state, oldest first."""
        return [run for run in self.all_runs() if not run.finished]

    def needing_recovery(self) -> list[RunState]:
        """Runs a restart looks at: unfinished, or finished with their result not yet delivered."""
        return [run for run in self.all_runs() if not (run.finished and run.delivery is not None)]

    def finished_before(self, cutoff: datetime) -> list[RunState]:
        """Finished runs that ended (their job's finished_at, else their last update) before `cutoff`."""
        return [run for run in self.all_runs() if run.finished and (ended := finished_at(run)) and ended < cutoff]

    def remove(self, run_id: str) -> bool:
        """Deletes a run (its folder, renamed to a hidden name first, so a half-deleted folder is never
        read as a run); False when it was gone already."""
        folder = self.folder(run_id)
        hidden = folder.with_name(REMOVING_PREFIX + folder.name)
        try:
            os.rename(folder, hidden)
        except FileNotFoundError:
            return False  # removed meanwhile by another process sharing the home
        shutil.rmtree(hidden, ignore_errors=True)
        self._made = {made for made in self._made if not made.is_relative_to(folder)}  # its outputs/ too
        return True

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


def _storable_state(run: RunState) -> tuple[RunState, bytes]:
    """The run and its state.json bytes; when it holds text no store can hold, both made safe."""
    try:
        text = run.model_dump_json(indent=2)
    except PydanticSerializationError:  # a lone surrogate cannot be encoded at all
        text = None
    if text is not None and storable(text):
        return run, text.encode()
    run = RunState.model_validate(made_safe(run.model_dump(mode="json")))
    return run, run.model_dump_json(indent=2).encode()


def _ended(run: RunState | None) -> bool:
    """True for a run that ended or is gone."""
    return run is None or run.finished
