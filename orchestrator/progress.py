"""Progress notes of a running agent step: what it is doing, sent to its conversation now and then."""

from __future__ import annotations

import asyncio
import logging

from gateway.api import Outbox
from gateway.events import now_ms
from gateway.models import OutgoingPayload
from orchestrator.results import SYSTEM_AGENT
from orchestrator.runstate import RunState

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
        self._after = after_sec
        self._interval = interval_sec
        self._loop = asyncio.get_running_loop()
        self._started = self._loop.time()
        self._last_sent: float | None = None
        self._last_text = ""
        self._latest: str | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False

    def __call__(self, note: str) -> None:
        """Takes the newest note from the agent's stream."""
        if self._closed:
            return
        self._latest = note
        if self._timer is None:
            due = self._started + self._after
            if self._last_sent is not None:
                due = max(due, self._last_sent + self._interval)
            self._timer = self._loop.call_at(due, self._send)

    def close(self) -> None:
        """Stops sending: the step is over."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _send(self) -> None:
        self._timer = None
        note, self._latest = self._latest, None
        if self._closed or note is None or note == self._last_text:
            return
        self._last_sent, self._last_text = self._loop.time(), note
        payload = OutgoingPayload.reply_to(
            self._run.payload(), NOTE_PREFIX + note, agent=SYSTEM_AGENT, timestamp=now_ms(),
            workflowRunId=self._run.runId, workflowStepId=self._step_id,
            progressKey=f"{self._run.runId}/{self._step_id}",
        ).model_copy(update={"message": NOTE_PREFIX + note, "files": []})  # a note never carries a file
        try:
            self._outbox.write(payload)
        except OSError as exc:  # a note is a courtesy: the run goes on
            log.warning("cannot write a progress note for run %s: %s", self._run.runId, exc)
