"""The background run executor: a named task per run, checkpoints per step, resume after a crash."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from gateway.api import Outbox
from gateway.events import EventLog, now_ms, utc_now_iso
from gateway.models import OutgoingPayload
from orchestrator.runs import RunState, RunStore, cap_text
from orchestrator.steps import StepFailed, StepRunner

log = logging.getLogger("switchyard.orchestrator.executor")

SYSTEM_AGENT = "switchyard"
_JOB_EVENTS = {"done": "job.succeeded", "failed": "job.failed.final", "cancelled": "job.cancelled"}


@dataclass
class _Waiting:
    """Messages waiting for a run's result to become their reply."""

    event: asyncio.Event = field(default_factory=asyncio.Event)
    count: int = 0


def result_text(run: RunState) -> str:
    """What a finished run tells the conversation: its answer, or why it failed or stopped."""
    last = run.last_step()
    if run.state == "done":
        output = (last[1].output or "").strip() if last else ""
        return output or f"Run {run.runId} (workflow {run.workflowId}) finished."
    if run.state == "cancelled":
        return f"Run {run.runId} (workflow {run.workflowId}) was cancelled."
    where = f" at step {last[0]}" if last and last[1].status == "failed" else ""
    return f"Run {run.runId} (workflow {run.workflowId}) failed{where}: {run.error or 'unknown error'}"


def result_reply(run: RunState) -> OutgoingPayload:
    """The payload carrying a finished run's result to the conversation that started it."""
    last = run.last_step()
    step_id = last[0] if last else run.currentStep
    agent = (last[1].agent or last[0]) if last and run.state == "done" else SYSTEM_AGENT
    return OutgoingPayload.reply_to(run.payload(), result_text(run), agent=agent, timestamp=now_ms(),
                                    workflowRunId=run.runId, workflowStepId=step_id)


class RunExecutor:
    """Runs workflow runs in the background and delivers each result exactly once (reply or push)."""

    def __init__(
        self, *, store: RunStore, steps: StepRunner, events: EventLog, outbox: Outbox, max_parallel: int = 4
    ):
        self._store = store
        self._steps = steps
        self._events = events
        self._outbox = outbox
        self._slots = asyncio.Semaphore(max_parallel)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._waiting: dict[str, _Waiting] = {}
        self._cancelled: set[str] = set()

    async def start(self) -> None:
        """Resumes unfinished runs (oldest first) and pushes results a crash left undelivered."""
        for run in self._store.all_runs():
            if not run.finished:
                self.submit(run.runId)
            elif run.delivery is None:
                self._push(run)

    async def stop(self) -> None:
        """Cancels running tasks; their runs stay `running` on disk and resume at the next start."""
        tasks = [task for task in self._tasks.values() if not task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def begin(self, run: RunState, key: str) -> RunState:
        """Stores a new run as the conversation's active run and starts executing it."""
        run = self._store.create(run, key)
        self._emit("job.created", run)
        self.submit(run.runId)
        return run

    def submit(self, run_id: str) -> None:
        """Starts a task for the run unless one is already executing it."""
        task = self._tasks.get(run_id)
        if task is None or task.done():
            self._tasks[run_id] = asyncio.create_task(self._execute(run_id), name=f"run:{run_id}")

    async def outcome(self, run_id: str, timeout_sec: float) -> RunState | None:
        """Waits for the run to end: the ended run if its result is the caller's reply, else None (pushed)."""
        run = self._store.load(run_id)
        if run is None or run.finished:
            return run
        waiting = self._waiting.setdefault(run_id, _Waiting())
        waiting.count += 1
        try:
            await asyncio.wait_for(waiting.event.wait(), timeout_sec)
        except TimeoutError:
            pass
        finally:
            waiting.count -= 1
            if not waiting.event.is_set() and waiting.count == 0:
                self._waiting.pop(run_id, None)
        return self._store.load(run_id) if waiting.event.is_set() else None

    async def cancel(self, run_id: str) -> RunState | None:
        """Stops a run (killing its processes) and marks it cancelled; returns the run as it is now."""
        run = self._store.load(run_id)
        if run is None or run.finished:
            return run
        task = self._tasks.get(run_id)
        if task is not None and not task.done():
            self._cancelled.add(run_id)
            task.cancel()
            await asyncio.wait([task])
        else:
            self._end_cancelled(run_id)
        return self._store.load(run_id)

    async def _execute(self, run_id: str) -> None:
        try:
            async with self._slots:
                await self._run_steps(run_id)
        except asyncio.CancelledError:
            if run_id not in self._cancelled:
                raise
            self._end_cancelled(run_id)
        except Exception as exc:
            log.exception("run %s failed unexpectedly", run_id)
            self._end_failed(run_id, f"internal error: {exc}")
        finally:
            self._cancelled.discard(run_id)

    async def _run_steps(self, run_id: str) -> None:
        run = self._store.load(run_id)
        if run is None or run.finished:
            return
        if run.state == "queued":
            run = self._store.transition(run, "running")
            self._emit("job.running", run)
        for step_id in list(run.steps):
            if run.steps[step_id].status == "completed":
                continue
            run = self._store.update_step(
                run, step_id, status="running", startedAt=utc_now_iso(), finishedAt=None, error=None,
                exitCode=None, agent=self._steps.agent_of(run, step_id),
            )
            try:
                outcome = await self._steps.run(run, step_id)
            except StepFailed as exc:
                self._record_failure(run, step_id, exc)
                return
            run = self._store.update_step(
                run, step_id, status="completed", finishedAt=utc_now_iso(), exitCode=outcome.exit_code,
                durationMs=outcome.duration_ms, output=cap_text(outcome.output),
                stderrTail=outcome.stderr_tail or None,
            )
        self._finish(self._store.transition(run, "done"))

    def _record_failure(self, run: RunState, step_id: str, exc: StepFailed) -> None:
        result = exc.result
        run = self._store.update_step(
            run, step_id, status="failed", finishedAt=utc_now_iso(), error=str(exc),
            exitCode=result.exit_code if result else None, stderrTail=result.stderr_tail if result else None,
            output=cap_text(result.stdout) if result and result.stdout else None,
        )
        self._finish(self._store.transition(run, "failed", error=f"step {step_id}: {exc}"))

    def _end_cancelled(self, run_id: str) -> None:
        run = self._store.load(run_id)
        if run is None or run.finished:
            return
        for step_id, step in run.steps.items():
            if step.status == "running":
                run = self._store.update_step(run, step_id, status="failed", finishedAt=utc_now_iso(),
                                              error="cancelled")
        self._finish(self._store.transition(run, "cancelled", error="cancelled"))

    def _end_failed(self, run_id: str, reason: str) -> None:
        run = self._store.load(run_id)
        if run is not None and not run.finished:
            self._finish(self._store.transition(run, "failed", error=reason))

    def _finish(self, run: RunState) -> None:
        """Delivers a finished run's result once: to a waiting message, else pushed to the conversation."""
        self._emit(_JOB_EVENTS[run.state], run, reason=run.error)
        waiting = self._waiting.pop(run.runId, None)
        if waiting is not None:
            self._store.save(run.model_copy(update={"delivery": "reply"}))
            waiting.event.set()
        else:
            self._push(run)

    def _push(self, run: RunState) -> None:
        try:
            self._outbox.write(result_reply(run))
        except Exception:
            log.exception("cannot push the result of run %s; it is retried at the next start", run.runId)
            return
        self._store.save(run.model_copy(update={"delivery": "push"}))

    def _emit(self, event: str, run: RunState, *, reason: str | None = None) -> None:
        conversation = run.conversation
        self._events.emit(event, job_id=run.runId, state=run.state, workflow=run.workflowId,
                          channel=conversation.channel, reason=reason,
                          conversation=conversation.conversationId or conversation.senderId)
