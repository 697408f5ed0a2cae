"""What a run is: its state.json model (steps, conversation, job), its id and its conversation's key."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import PydanticSerializationError

from gateway.models import IncomingPayload
from gateway.scope import ConversationScope
from gateway.storable import made_safe, storable
from gateway.telemetry.events import utc_now_iso
from gateway.telemetry.tracing import trace_id_of
from orchestrator.runs.jobs import FINISHED, JobInfo, JobState, parse_iso

StepStatus = Literal["pending", "running", "waiting", "completed", "failed"]
OUTPUT_CAP = 65536


class UnreadableRun(Exception):
    """A stored run that is not one (a corrupt or hand-edited state): what is wrong with it."""


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
    delivery: Literal["reply", "push", "told"] | None = None
    """How a finished run's result reached its conversation: as its waiting message's reply, pushed, or
    `told` by the reply to the `/stop` (or cancel) of that conversation that cancelled it: nothing else sent."""
    job: JobInfo = Field(default_factory=JobInfo)

    @property
    def finished(self) -> bool:
        """Tells whether the run reached a final state."""
        return self.state in FINISHED

    @property
    def refused(self) -> bool:
        """True for a run that ended on a permanent failure (a provider refused: CLI missing, not logged
        in, prompt too large...): retrying cannot fix it, the operator must."""
        return self.state == "failed_final" and any(
            step.status == "failed" and (step.model_extra or {}).get("permanent") for step in self.steps.values())

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
                "traceId": trace_id_of(self.message),  # the trace of the message that started it (telemetry on)
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
    """The key of a conversation in the active-run association: its scope's path (gateway.scope)."""
    return ConversationScope.of(message).path


def stored_conversation_key(message: dict[str, Any]) -> str:
    """`conversation_key` of a run's stored message, without validating it."""
    channel = str(message.get("channel") or "")
    conversation = message.get("conversationId") or message.get("senderId") or message.get("sender") or ""
    return ConversationScope(channel, str(message.get("channelProfileId") or channel), str(conversation)).path


def belongs_to(run: RunState, message: IncomingPayload) -> bool:
    """True when `run` was started in the conversation `message` comes from (same key); False for a run
    whose message cannot be read (an unreadable run's stand-in): it belongs to no conversation."""
    try:
        return conversation_key(run.payload()) == conversation_key(message)
    except ValidationError:
        return False


def finished_at(run: RunState) -> datetime | None:
    """When a finished run ended (its job's finished_at, else its last update); None if unreadable."""
    try:
        return parse_iso(run.job.finished_at or run.updatedAt)
    except ValueError:
        return None


def cap_text(text: str, limit: int = OUTPUT_CAP) -> str:
    """Cuts a long text to `limit` characters, saying so at the end."""
    return text if len(text) <= limit else text[:limit] + f"\n… ({len(text) - limit} more characters cut)"


def unreadable_stand_in(run_id: str, raw: bytes, reason: str) -> RunState:
    """What stands for a run whose stored state is not a run (corrupt, or edited by hand): failed_final
    with `reason`, keeping what of its workflow and conversation can still be read, so its sender is
    told. With no conversation left to tell, `delivery` says there is nothing to hand over."""
    try:
        found = json.loads(raw)
    except ValueError:
        found = None
    data: dict[str, Any] = found if isinstance(found, dict) else {}
    now = utc_now_iso()
    base = {"runId": run_id, "workflowId": str(data.get("workflowId") or "?"),
            "orchestratorId": str(data.get("orchestratorId") or "?"), "state": "failed_final", "steps": {},
            "createdAt": data["createdAt"] if isinstance(data.get("createdAt"), str) else now, "error": reason,
            "job": {"finished_at": now, "failure_reason": reason, "failure_category": "fatal"}}
    try:
        run = RunState.model_validate({**base, "message": data.get("message"),
                                       "conversation": data.get("conversation")})
        run.payload()
        return run
    except ValidationError:
        return RunState.model_validate({**base, "message": {}, "conversation": {"channel": "?"}, "delivery": "push"})


def storable_state(run: RunState, indent: int | None = 2) -> tuple[RunState, bytes]:
    """The run and its state.json bytes; when it holds text no store can hold, both made safe."""
    try:
        text = run.model_dump_json(indent=indent)
    except PydanticSerializationError:  # a lone surrogate cannot be encoded at all
        text = None
    if text is not None and storable(text):
        return run, text.encode()
    run = RunState.model_validate(made_safe(run.model_dump(mode="json")))
    return run, run.model_dump_json(indent=indent).encode()
