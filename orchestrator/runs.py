"""The run store: `runs/<runId>/state.json`, per-run events, the transition table, active runs."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway.events import utc_now_iso
from gateway.home import Home, atomic_write, safe_name
from gateway.models import IncomingPayload
from orchestrator.jobs import FINISHED, JobInfo, JobState, check_transition

log = logging.getLogger("switchyard.orchestrator.runs")

StepStatus = Literal["pending", "running", "waiting", "completed", "failed"]
OUTPUT_CAP = 65536
EVENT_TAIL_BYTES = 8192


class StepState(BaseModel):
    """One step's fragment of state.json."""

    model_config = ConfigDict(extra="allow")

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

    channel: str
    channelProfileId: str | None = None
    conversationId: str | None = None
    senderId: str | None = None


class RunState(BaseModel):
    """The whole of `runs/<runId>/state.json`."""

    model_config = ConfigDict(extra="allow")

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
    """Reads and writes runs on disk; every state change goes through the transition table."""

    def __init__(self, home: Home, *, fsync: bool = True):
        self._root = home.runs
        self._fsync = fsync

    @property
    def active_file(self) -> Path:
        """`runs/active.json`: which run is active in which conversation."""
        return self._root / "active.json"

    def folder(self, run_id: str) -> Path:
        """The folder of one run (its state, events, request files and workspace)."""
        return self._root / safe_name(run_id)

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

    def save(self, run: RunState) -> RunState:
        """Writes state.json atomically, stamping `updatedAt`."""
        run = run.model_copy(update={"updatedAt": utc_now_iso()})
        folder = self.folder(run.runId)
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write(folder / "state.json", run.model_dump_json(indent=2).encode(), fsync=self._fsync)
        return run

    def create(self, run: RunState, key: str) -> RunState:
        """Stores a new run and makes it the active run of its conversation."""
        run = self.save(run)
        self.append_event(run.runId, "run.created", workflowId=run.workflowId)
        self.set_active(key, run.runId)
        return run

    def transition(self, run: RunState, state: JobState, **changes: Any) -> RunState:
        """Moves a run to `state` (raising IllegalTransition if the table forbids it) and saves it."""
        check_transition(run.runId, run.state, state)
        run = self.save(run.model_copy(update={"state": state, **changes}))
        self.append_event(run.runId, "run.state", state=state, error=changes.get("error"))
        if run.finished:
            self.clear_active(run.runId)
        return run

    def update_step(self, run: RunState, step_id: str, **fields: Any) -> RunState:
        """Changes fields of one step and saves the run (a checkpoint at a step boundary)."""
        step = run.steps[step_id].model_copy(update=fields)
        steps = {**run.steps, step_id: step}
        changes: dict[str, Any] = {"steps": steps}
        if fields.get("status") in ("running", "waiting"):
            changes["currentStep"] = step_id
        run = self.save(run.model_copy(update=changes))
        if "status" in fields:
            self.append_event(run.runId, "step." + str(step.status), step=step_id, exitCode=step.exitCode)
        return run

    def append_event(self, run_id: str, event: str, **fields: Any) -> None:
        """Appends one line to the run's events.jsonl."""
        record = {"ts": utc_now_iso(), "event": event, **{k: v for k, v in fields.items() if v is not None}}
        path = self.folder(run_id) / "events.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")

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
        """The conversation key → run id association."""
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
        """Associates a conversation with a run."""
        with self._active_lock():
            self._write_active({**self.active_runs(), key: run_id})

    def clear_active(self, run_id: str) -> None:
        """Removes every association pointing at a run (it ended)."""
        with self._active_lock():
            active = self.active_runs()
            remaining = {k: v for k, v in active.items() if v != run_id}
            if remaining != active:
                self._write_active(remaining)

    @contextlib.contextmanager
    def _active_lock(self) -> Iterator[None]:
        """Serialises read-modify-write of active.json across processes sharing the home."""
        self._root.mkdir(parents=True, exist_ok=True)
        with (self._root / ".active.lock").open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _write_active(self, active: dict[str, str]) -> None:
        self._root.mkdir(parents=True, exist_ok=True)
        atomic_write(self.active_file, json.dumps(active, indent=2).encode(), fsync=self._fsync)

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


def cap_text(text: str, limit: int = OUTPUT_CAP) -> str:
    """Cuts a long text to `limit` characters, saying so at the end."""
    return text if len(text) <= limit else text[:limit] + f"\n… ({len(text) - limit} more characters cut)"
