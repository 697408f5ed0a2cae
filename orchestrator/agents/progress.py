"""Progress notes of a running agent step: what it is doing, sent to its conversation now and then."""

from __future__ import annotations

import asyncio
import logging

from gateway.api import Outbox
from gateway.models import OutgoingPayload
from gateway.telemetry.events import now_ms
from orchestrator.agents.streaming import Throttle
from orchestrator.execution.results import SYSTEM_AGENT
from orchestrator.runs.state import RunState

log = logging.getLogger("switchyard.orchestrator.progress")

NOTE_PREFIX = "⏳ "


class ProgressNotes:
    """Turns an agent's stream notes into chat notes: none before `after_sec`, then the latest one at
    most every `interval_sec`. Each carries `progressKey` (`<runId>/<stepId>`), so a channel that can
    edit a message keeps one note up to date instead of posting many."""

    def __init__(self, outbox: Outbox, run: RunState, step_id: str, *, after_sec: float, interval_sec: float):
        self._outbox = outbox
        self._run = run
        self._step_id = step_id
        self._throttle: Throttle[str] = Throttle(self._send, after_sec=after_sec, interval_sec=interval_sec,
                                                 started=asyncio.get_running_loop().time())

    def __call__(self, note: str) -> None:
        """Takes the newest note from the agent's stream."""
        self._throttle(note)

    def close(self) -> None:
        """Stops sending: the step is over."""
        self._throttle.close()

    def _send(self, note: str) -> None:
        payload = OutgoingPayload.reply_to(
            self._run.payload(), NOTE_PREFIX + note, agent=SYSTEM_AGENT, timestamp=now_ms(),
            workflowRunId=self._run.runId, workflowStepId=self._step_id,
            progressKey=f"{self._run.runId}/{self._step_id}",
        ).model_copy(update={"message": NOTE_PREFIX + note, "files": []})  # a note never carries a file
        try:
            self._outbox.write(payload)
        except OSError as exc:  # a note is a courtesy: the run goes on
            log.warning("cannot write a progress note for run %s: %s", self._run.runId, exc)
