"""Job lifecycle actions: every state change of a run with its events, coordination files and delivery."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from gateway.home import atomic_write, safe_name
from gateway.storable import made_safe
from gateway.telemetry.events import EventLog, utc_now_iso
from orchestrator.execution.coordination import Coordination
from orchestrator.execution.results import Delivery, result_text
from orchestrator.execution.steps import StepFailed, StepOutcome, StepRunner
from orchestrator.execution.steps.values import parse_json
from orchestrator.runs.base import RunStoreBase
from orchestrator.runs.jobs import FailureCategory, iso_in, ms_between
from orchestrator.runs.state import RunState, cap_text

log = logging.getLogger("switchyard.orchestrator.lifecycle")

CONTEXT_OUTPUT_CAP = 4096
OUTPUT_FILE_CHARS = 4096  # a one-step run's output up to this long is kept in its state only, not as a file
SUMMARY_CAP = 1000
_REPORT_STATUS = {"done": "complete", "failed_final": "failed", "cancelled": "cancelled"}


class Lifecycle:
    """Moves runs through the spec-003 states, emitting `job.*` events and keeping coordination/ current.

    state.json is written once per step boundary. The claim and the start of the first step are one
    write without fsync: a power cut that loses it leaves the run `queued`, and its first step runs
    when it is claimed again, as it would have to anyway. Each later boundary (a step completed and
    the next one started, or the run ended with its delivery decided) is one fsynced write; a step
    completed but not yet written runs again after a crash, as a step interrupted while running does.
    """

    def __init__(self, *, store: RunStoreBase, steps: StepRunner, events: EventLog, coordination: Coordination,
                 delivery: Delivery, owner: str):
        self.store = store
        self.steps = steps
        self.events = events
        self.coordination = coordination
        self.delivery = delivery
        self.owner = owner

    def emit(self, event: str, run: RunState, **fields: Any) -> None:
        """Writes a `job.*` event to the event log and to the run's events.jsonl."""
        common = _event_fields(run)
        self.events.emit(event, job_id=run.runId, **common, **fields)
        self.store.append_event(run.runId, event, **{**common, **fields})

    # --- intake and claim ----------------------------------------------------------------------

    def created(self, run: RunState, *, announced: bool) -> None:
        """Announces a new queued job (unless its channel already did) and lists it as pending."""
        if not announced:
            self.emit("job.created", run, created_at=run.createdAt, retries=run.job.retries)
        self.coordination.enqueue(self.task(run))

    def task(self, run: RunState) -> dict[str, Any]:
        """The work_queue.json entry of a queued run."""
        pending = next((n for n, s in run.steps.items() if s.status != "completed"), None)
        agent = (self.steps.agent_of(run, pending) if pending else None) or run.workflowId
        return {"id": run.runId, "type": "workflow", "priority": 1, "agent": agent, "created_at": run.createdAt,
                "context": {"workflow": run.workflowId, "orchestrator": run.orchestratorId, "state": run.state,
                            "retries": run.job.retries, "next_retry_at": run.job.next_retry_at,
                            "conversation": run.conversation.model_dump(exclude_none=True)}}

    def claimed(self, run: RunState) -> RunState:
        """queued → running: records owner and started_at, moves the task to active_work.json. Not
        written: what the run does next (its step starting, pausing or ending) writes it."""
        started = utc_now_iso()
        run = self.store.transition(run, "running", save=False, job=run.job.model_copy(update={
            "owner": self.owner, "started_at": started, "next_retry_at": None}))
        self.emit("job.running", run, owner=self.owner, started_at=started, retries=run.job.retries)
        self.coordination.activate({
            "task_id": run.runId, "agent": run.workflowId, "status": "in_progress", "started_at": started,
            "last_update": started, "context": {"workflow": run.workflowId, "owner": self.owner,
                                                "pid": os.getpid(), "step": run.currentStep}})
        return run

    # --- steps ----------------------------------------------------------------------------------

    def step_started(self, run: RunState, step_id: str, *, after_step: bool) -> RunState:
        """Marks a step running and writes the run: fsynced and checkpointed when it also records the
        step completed just before (`after_step`), else (the claim and a first step) without fsync."""
        agent = self.steps.agent_of(run, step_id)
        run = self.store.update_step(run, step_id, durable=after_step, status="running", startedAt=utc_now_iso(),
                                     finishedAt=None, error=None, exitCode=None, agent=agent)
        if after_step:
            self.checkpoint(run)
        self.coordination.touch(run.runId, step=step_id, **({"agent": agent} if agent else {}))
        return run

    def step_completed(self, run: RunState, step_id: str, outcome: StepOutcome) -> RunState:
        """Records a completed step (written with the next step's start or the run's end), its output
        file and a handoff to the next agent."""
        output = cap_text(outcome.output)
        self._write_output(run, step_id, outcome.output)
        run = self.store.update_step(run, step_id, save=False, **{
            **outcome.fields, "status": "completed", "finishedAt": utc_now_iso(), "exitCode": outcome.exit_code,
            "durationMs": outcome.duration_ms, "output": output, "stderrTail": outcome.stderr_tail or None})
        self.events.emit("step.completed", run_id=run.runId, workflow=run.workflowId, step=step_id,
                         step_kind=run.steps[step_id].kind, agent=run.steps[step_id].agent,
                         channel=run.conversation.channel, duration_ms=outcome.duration_ms)
        return self._hand_over(run, step_id)

    def step_failed(self, run: RunState, step_id: str, exc: StepFailed) -> None:
        """Records a failed step, then fails the run (retried or final by category)."""
        result = exc.result
        fields = {**exc.fields, "status": "failed", "finishedAt": utc_now_iso(), "error": str(exc),
                  "exitCode": exc.exit_code, "category": exc.category}
        if result is not None:
            fields.update(stderrTail=result.stderr_tail or None,
                          output=cap_text(result.stdout) if result.stdout else None)
        run = self.store.update_step(run, step_id, **fields)
        self.checkpoint(run)
        self.failed(run, f"step {step_id}: {exc}", exc.category)

    def _write_output(self, run: RunState, step_id: str, output: str) -> None:
        """Writes `outputs/<step>.txt` where it is needed: for a run of several steps (its checkpoints and
        handoffs point at it), or an output too long to be whole in the run's state."""
        if not _output_file(run, output):
            return
        folder = self.store.made(self.store.folder(run.runId) / "outputs")
        atomic_write(folder / f"{safe_name(step_id)}.txt", made_safe(output).encode(), fsync=False)

    def _hand_over(self, run: RunState, step_id: str) -> RunState:
        names = list(run.steps)
        index = names.index(step_id)
        previous = run.steps[names[index - 1]] if index > 0 else None
        taken = (previous.model_extra or {}).get("handoffPath") if previous is not None else None
        if taken:
            self.coordination.take_handoff(Path(str(taken)))
        following = names[index + 1] if index + 1 < len(names) else None
        from_agent = run.steps[step_id].agent
        to_agent = self.steps.agent_of(run, following) if following else None
        if not from_agent or not to_agent or self.steps.kind_of(run, following or "") != "agent":
            return run
        path = self.coordination.handoff({
            "from_agent": from_agent, "to_agent": to_agent, "task_id": run.runId, "from_step": step_id,
            "to_step": following, "handoff_context": handoff_context(run.steps[step_id].output),
            "created_at": utc_now_iso()})
        return self.store.update_step(run, step_id, save=False, handoffPath=str(path))

    def checkpoint(self, run: RunState, completed_at: str | None = None) -> None:
        """Writes checkpoints/<runId>/{metadata,state,context,artifacts}.json (at step boundaries). A run
        of one step (a chat reply) has no boundary between steps and gets none: spec 001 checkpoints
        long-running tasks at phase boundaries; its completion report and runs/<id>/ hold its result."""
        names = list(run.steps)
        if len(names) < 2:
            return
        done = [n for n in names if run.steps[n].status == "completed"]
        outputs = self.store.folder(run.runId) / "outputs"
        self.coordination.checkpoint(run.runId, {
            "metadata": {"task_id": run.runId, "workflow": run.workflowId, "orchestrator": run.orchestratorId,
                         "phase": len(done), "phase_name": done[-1] if done else None,
                         "total_phases": len(names), "state": run.state, "completed_at": completed_at},
            "state": {"state": run.state, "currentStep": run.currentStep, "job": run.job.model_dump(),
                      "steps": {n: {"status": s.status, "exitCode": s.exitCode, "durationMs": s.durationMs}
                                for n, s in run.steps.items()}},
            "context": {"input": run.input, "message": run.message.get("message"),
                        "outputs": {n: cap_text(run.steps[n].output or "", CONTEXT_OUTPUT_CAP) for n in done}},
            "artifacts": [{"step": n, "path": str(outputs / f"{safe_name(n)}.txt")} for n in done],
        }, now=completed_at is not None)

    # --- outcomes -------------------------------------------------------------------------------

    def failed(self, run: RunState, reason: str, category: FailureCategory) -> None:
        """running → failed, then → queued with a backoff when retries remain, else → failed_final."""
        policy = self.steps.retry_policy(run)
        run = self.store.transition(run, "failed", error=reason, job=run.job.model_copy(update={
            "failure_reason": reason, "failure_category": category, "max_retries": policy.max_retries}))
        self.settle_failure(run)

    def settle_failure(self, run: RunState) -> None:
        """Decides a `failed` run's next state from its recorded category and retries."""
        policy = self.steps.retry_policy(run)
        category: FailureCategory = run.job.failure_category or "fatal"
        reason = run.job.failure_reason or run.error or "unknown failure"
        if not policy.allows(category, run.job.retries):
            run = self.store.transition(run, "failed_final", save=False, job=_ended(run))
            self._finish(run, "job.failed.final", reason=reason, failure_reason=reason, failure_category=category,
                         retries=run.job.retries)
            return
        next_at = iso_in(policy.delay_sec(run.job.retries))
        self.emit("job.failed.retryable", run, reason=reason, failure_reason=reason, failure_category=category,
                  retries=run.job.retries, next_retry_at=next_at)
        run = self.store.transition(run, "queued", job=run.job.model_copy(update={
            "retries": run.job.retries + 1, "next_retry_at": next_at}))
        self.requeued(run, f"retry after: {reason}")

    def requeued(self, run: RunState, reason: str) -> None:
        """Lists a run queued again (retry, answer, recovery) as pending and says so."""
        self.emit("job.requeued", run, reason=reason, retries=run.job.retries, next_retry_at=run.job.next_retry_at)
        self.coordination.deactivate(run.runId)
        self.coordination.enqueue(self.task(run))

    def interrupted(self, run: RunState, reason: str) -> None:
        """running → queued when the executing process stops or died; resumes from the last completed step."""
        self.requeued(self.store.transition(run, "queued"), reason)

    def succeeded(self, run: RunState) -> None:
        """running → done (written with its last step's completion), then the result is delivered."""
        run = self.store.transition(run, "done", save=False, error=None, job=_ended(run))
        self._finish(run, "job.succeeded", duration=ms_between(run.job.started_at, utc_now_iso()),
                     retries=run.job.retries)

    def paused(self, run: RunState, step_id: str) -> None:
        """running → waiting_input: the input step's question goes to the conversation."""
        prompt = self.steps.prompt_of(run, step_id)
        run = self.store.update_step(run, step_id, status="waiting", startedAt=utc_now_iso(), prompt=prompt,
                                     promptDelivery=None)
        run = self.store.transition(run, "waiting_input")
        self.emit("job.waiting_input", run, step=step_id, reason=prompt)
        self.coordination.deactivate(run.runId)
        self.checkpoint(run)
        self.delivery.asked(run, step_id, prompt)

    def answered(self, run: RunState, step_id: str, text: str, message_id: str, sender: str) -> RunState:
        """waiting_input → queued with the answer as the input step's output."""
        self._write_output(run, step_id, text)
        run = self.store.update_step(run, step_id, status="completed", finishedAt=utc_now_iso(), output=text,
                                     exitCode=0, answerMessageId=message_id, answeredBy=sender)
        run = self.store.transition(run, "queued")
        self.checkpoint(run)
        self.requeued(run, f"input received for step {step_id}")
        return run

    def cancelled(self, run: RunState, *, told: bool = False) -> None:
        """Any unfinished state → cancelled; a running or waiting step is marked failed: cancelled. `told`:
        the message that cancelled it tells its conversation (Delivery.record): its result is not sent."""
        for step_id, step in run.steps.items():
            if step.status in ("running", "waiting"):
                run = self.store.update_step(run, step_id, status="failed", finishedAt=utc_now_iso(),
                                             error="cancelled")
        run = self.store.transition(run, "cancelled", save=False, error="cancelled", job=_ended(run))
        self._finish(run, "job.cancelled", told=told, reason="cancelled")

    def recover(self, run: RunState) -> None:
        """Settles a run a process left at start-up (its lock taken): re-sends an undelivered result,
        requeues an interrupted run, settles a failure, re-asks an unasked question."""
        if run.finished:
            if run.delivery is None:
                self.store.settle(self.delivery.push(run, recovering=True))
        elif run.state == "running":
            self.interrupted(run, "recovered after a restart: resuming from the last completed step")
        elif run.state == "failed":
            if run.delivery is not None:  # an older store's final failure, already delivered
                self.store.transition(run, "failed_final")
            else:
                self.settle_failure(run)
        elif run.state == "queued":
            self.coordination.enqueue(self.task(run))
        elif run.state == "waiting_input":
            step = run.steps.get(run.currentStep or "")
            if step is not None and not (step.model_extra or {}).get("promptDelivery"):
                self.delivery.asked(run, run.currentStep or "", str((step.model_extra or {}).get("prompt", "")))

    def _finish(self, run: RunState, event: str, *, told: bool = False, **fields: Any) -> None:
        """Writes a run that reached a final state (one fsynced write, with the delivery decided: a
        waiting message's reply, else a push after it), announces `event`, writes its coordination
        records, then delivers."""
        common = _event_fields(run)
        self.store.append_event(run.runId, event, **{**common, **fields})  # written with the final state
        run, waiting, written = self.delivery.record(run, told=told)
        self.events.emit(event, job_id=run.runId, **common, **fields)  # announced once that is written
        finished = run.job.finished_at or utc_now_iso()
        self.coordination.deactivate(run.runId)
        self.coordination.dequeue(run.runId)
        self.checkpoint(run, completed_at=finished)
        self.coordination.forget(run.runId)
        done = [n for n, s in run.steps.items() if s.status == "completed"]
        outputs = self.store.folder(run.runId) / "outputs"
        last = run.last_step()
        self.coordination.complete({
            "task_id": run.runId, "agent": (last[1].agent if last else None) or run.workflowId,
            "status": _REPORT_STATUS.get(run.state, run.state), "state": run.state, "workflow": run.workflowId,
            "artifacts": [str(outputs / f"{safe_name(n)}.txt") for n in done
                          if _output_file(run, run.steps[n].output or "")], "completed_at": finished,
            "retries": run.job.retries, "duration_ms": run.job.duration_ms, "error": run.error,
            "handoff_context": handoff_context(result_text(run))})
        self.store.close_events(run.runId)
        if written:
            self.store.settle(self.delivery.hand_over(run, waiting))
        else:  # its archived line is its final write, made before the waiting messages are handed the result
            self.delivery.hand_over(self._settle_unwritten(run), waiting)

    def _settle_unwritten(self, run: RunState) -> RunState:
        """Settles a finished run not yet written in its final state; its state.json is written instead when
        the store did not keep it (the archive refused the line: tidied into it at the next start)."""
        try:
            if self.store.settle(run):
                return run
        except Exception:
            log.exception("cannot archive run %s; its state is kept in its folder", run.runId)
        return self.store.save(run)


def _event_fields(run: RunState) -> dict[str, Any]:
    """What every `job.*` event of a run says about it."""
    conversation = run.conversation
    return {"state": run.state, "workflow": run.workflowId, "channel": conversation.channel,
            "profile": conversation.channelProfileId or conversation.channel,
            "conversation": conversation.conversationId or conversation.senderId,
            "repo": run.job.repo, "branch": run.job.branch}


def _output_file(run: RunState, output: str) -> bool:
    """Whether a step's output is kept as a file too (see Lifecycle._write_output)."""
    return len(run.steps) > 1 or len(output) > OUTPUT_FILE_CHARS


def _ended(run: RunState) -> Any:
    """The job fields of a run reaching a final state now."""
    finished = utc_now_iso()
    return run.job.model_copy(update={"finished_at": finished, "next_retry_at": None,
                                      "duration_ms": ms_between(run.createdAt, finished)})


def handoff_context(output: str | None) -> dict[str, Any]:
    """The handoff context of an output: its own `handoff_context`/`summary` JSON, else a summary of it."""
    parsed = parse_json(output)
    if isinstance(parsed, dict):
        nested = parsed.get("handoff_context")
        given: dict[str, Any] = nested if isinstance(nested, dict) else parsed
        if "summary" in given:
            return {"summary": str(given.get("summary")), "key_findings": list(given.get("key_findings") or []),
                    "open_questions": list(given.get("open_questions") or [])}
    return {"summary": cap_text((output or "").strip(), SUMMARY_CAP), "key_findings": [], "open_questions": []}
