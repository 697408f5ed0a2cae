"""The run store: `runs/<runId>/state.json`, per-run events, the transition table, active runs."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
from collections import OrderedDict
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway.events import utc_now_iso
from gateway.home import Home, atomic_write, fsync_dir, safe_name
from gateway.models import IncomingPayload
from orchestrator.jobs import FINISHED, JobInfo, JobState, check_transition

log = logging.getLogger("switchyard.orchestrator.runs")

StepStatus = Literal["pending", "running", "waiting", "completed", "failed"]
OUTPUT_CAP = 65536
EVENT_TAIL_BYTES = 8192
MADE_FOLDERS = 4096  # folders remembered as existing
OPEN_EVENT_FILES = 64  # per-run events.jsonl kept open at once (runs in progress, oldest closed first)


class StepState(BaseModel):
    """One step's fragment of state.json."""

    model_config = ConfigDict(extra="allow", defer_build=True)

    status: StepStatus = "pending"
    kind: str | None = None
    agent: str | None = None
    startedAt: str | None = None
    finishedAt: str | None = None
    exitCode: int | None = None
    durationMs: int | None = None
    output: str | None = None
    error: str | None = None
    stderrTail: str | None = None


class Conversation(BaseModel):
    """Where a run's results go: the conversation of the message that started it."""

    model_config = ConfigDict(defer_build=True)

    channel: str
    channelProfileId: str | None = None
    conversationId: str | None = None
    senderId: str | None = None


class RunState(BaseModel):
    """The whole of `runs/<runId>/state.json`."""

    model_config = ConfigDict(extra="allow", defer_build=True)  # built when a run is first read, not on import

    runId: str
    workflowId: str
    orchestratorId: str
    state: JobState = "queued"
    currentStep: str | None = None
    createdAt: str = Field(default_factory=utc_now_iso)
    updatedAt: str = Field(default_factory=utc_now_iso)
    input: dict[str, Any] = Field(default_factory=dict)
    message: dict[str, Any]
    conversation: Conversation
    steps: dict[str, StepState]
    error: str | None = None
    delivery: Literal["reply", "push"] | None = None
    job: JobInfo = Field(default_factory=JobInfo)

    @property
    def finished(self) -> bool:
        """Tells whether the run reached a final state."""
        return self.state in FINISHED

    def payload(self) -> IncomingPayload:
        """The message that started the run."""
        return IncomingPayload.model_validate(self.message)

    def last_step(self) -> tuple[str, StepState] | None:
        """The last step that ran (completed or failed), if any."""
        ran = [(name, step) for name, step in self.steps.items() if step.status in ("completed", "failed")]
        return ran[-1] if ran else None

    def overview(self) -> dict[str, Any]:
        """The summary with its conversation, creation time and every step's status (for the dashboard)."""
        steps = [{"id": name, "status": step.status, "durationMs": step.durationMs}
                 for name, step in self.steps.items()]
        conversation = self.conversation
        return {**self.summary(), "createdAt": self.createdAt, "error": self.error, "steps": steps,
                "conversation": f"{conversation.channel}/{conversation.conversationId or conversation.senderId}"}

    def summary(self) -> dict[str, Any]:
        """The few fields `status` and the selector request show."""
        return {"runId": self.runId, "workflowId": self.workflowId, "state": self.state,
                "currentStep": self.currentStep, "updatedAt": self.updatedAt, "retries": self.job.retries}


def run_id_for(message: IncomingPayload) -> str:
    """A run id derived from the starting message, so a retried message finds its run again."""
    when = datetime.fromtimestamp(message.timestamp / 1000, UTC).strftime("%Y%m%d-%H%M%S")
    key = "\0".join([message.channel, message.profile, message.messageId, str(message.timestamp)])
    return f"r-{when}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def conversation_key(message: IncomingPayload) -> str:
    """The key of a conversation in the active-run association."""
    return f"{message.channel}/{message.profile}/{message.conversation}"


class RunStore:
    """Reads and writes runs on disk; every state change goes through the transition table.

    Durability: `save` fsyncs state.json by default; the lifecycle saves without fsync (`durable=False`)
    only where losing the write in a power cut merely makes a step run again (see Lifecycle). The
    active-run index (`runs/active.json`) is never fsynced: it is rebuilt from the runs' own state
    at start (`restore_active`).
    """

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
        """The run with this id, or None when there is none (or the id is not a valid name)."""
        if safe_name(run_id) != run_id:
            return None
        path = self.folder(run_id) / "state.json"
        try:
            return RunState.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValidationError) as exc:
            log.error("cannot read %s: %s", path, exc)
            return None

    def save(self, run: RunState, *, durable: bool = True) -> RunState:
        """Writes state.json atomically, stamping `updatedAt`; fsynced unless `durable` is False."""
        run = run.model_copy(update={"updatedAt": utc_now_iso()})
        folder = self.made(self.folder(run.runId))
        atomic_write(folder / "state.json", run.model_dump_json(indent=2).encode(), fsync=self._fsync and durable)
        return run

    def create(self, run: RunState, key: str | None, *, durable: bool = True) -> RunState:
        """Stores a new run and, given its conversation's `key`, makes it the conversation's active run."""
        run = self.save(run, durable=durable)
        self.append_event(run.runId, "run.created", workflowId=run.workflowId)
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
            run = self.save(run, durable=durable)
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
        if save:
            run = self.save(run, durable=durable)
        if "status" in fields:
            self.append_event(run.runId, "step." + str(step.status), step=step_id, exitCode=step.exitCode)
        return run

    def append_event(self, run_id: str, event: str, **fields: Any) -> None:
        """Appends one line to the run's events.jsonl (opened once while the run goes on)."""
        record = {"ts": utc_now_iso(), "event": event, **{k: v for k, v in fields.items() if v is not None}}
        line = (json.dumps(record, ensure_ascii=False, default=str) + "\n").encode()
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


def _ended(run: RunState | None) -> bool:
    """True for a run that ended or is gone."""
    return run is None or run.finished


def cap_text(text: str, limit: int = OUTPUT_CAP) -> str:
    """Cuts a long text to `limit` characters, saying so at the end."""
    return text if len(text) <= limit else text[:limit] + f"\n… ({len(text) - limit} more characters cut)"
