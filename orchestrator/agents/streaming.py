"""Streamed answers: an agent turn's text so far (`TurnRequest.on_text`) becomes draft replies that a channel
which edits messages shows as one preview updated in place, and that the run's result reply then replaces.

A draft is an ordinary outgoing payload with `progressKey` = the run's stream key and `draft: true`; the
result reply of the run names the same key as `streamKey` (orchestrator/execution/results.py). The delivery loop
(gateway/runtime/sending.py) sends only the newest waiting draft of a key, none to a channel that cannot
edit, and spaces a channel's edits; the channel edits the preview into the result's first part.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Generic, TypeVar

from gateway.api import Outbox
from gateway.models import OutgoingPayload
from gateway.telemetry.events import now_ms
from orchestrator.runs.state import RunState

log = logging.getLogger("switchyard.orchestrator.streaming")

T = TypeVar("T")


def stream_key(run: RunState) -> str:
    """The key of a run's streamed answer, named after the message that started it: every agent step of the
    run, and of a run started again for that message (a retry, a restart), previews into one message, which
    the run's result then replaces."""
    return f"answer:{run.payload().messageId}"


class Throttle(Generic[T]):
    """Hands on only the newest value, and not too often: the first `after_sec` after `started` (the
    first value when None), later ones at least `interval_sec` apart; a value equal to the last one handed
    on is skipped. `close` drops what still waits."""

    def __init__(self, emit: Callable[[T], None], *, after_sec: float, interval_sec: float,
                 started: float | None = None):
        self._emit = emit
        self._after = after_sec
        self._interval = interval_sec
        self._loop = asyncio.get_running_loop()
        self._started = started
        self._last_sent: float | None = None
        self._last: T | None = None
        self._latest: T | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False

    def __call__(self, value: T) -> None:
        """Takes the newest value."""
        if self._closed:
            return
        self._latest = value
        if self._started is None:
            self._started = self._loop.time()
        if self._timer is None:
            due = self._started + self._after
            if self._last_sent is not None:
                due = max(due, self._last_sent + self._interval)
            self._timer = self._loop.call_at(due, self._fire)

    def close(self) -> None:
        """Hands nothing on any more."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self) -> None:
        self._timer = None
        value, self._latest = self._latest, None
        if self._closed or value is None or value == self._last:
            return
        self._last_sent, self._last = self._loop.time(), value
        self._emit(value)


class TextPreviews:
    """A turn's `on_text`: writes its text so far as drafts of the run's stream, throttled."""

    def __init__(self, outbox: Outbox, run: RunState, step_id: str, agent: str, *, after_sec: float,
                 interval_sec: float):
        self._outbox = outbox
        self._run = run
        self._step_id = step_id
        self._agent = agent
        self._throttle: Throttle[str] = Throttle(self._write, after_sec=after_sec, interval_sec=interval_sec)

    def __call__(self, text: str) -> None:
        """Takes the answer written so far (a TextSink)."""
        if text.strip():
            self._throttle(text)

    def close(self) -> None:
        """The turn is over: no more drafts (its result replaces the preview)."""
        self._throttle.close()

    def _write(self, text: str) -> None:
        payload = OutgoingPayload.reply_to(
            self._run.payload(), text, agent=self._agent, timestamp=now_ms(), quoted=[text],
            workflowRunId=self._run.runId, workflowStepId=self._step_id,
            progressKey=stream_key(self._run), draft=True,
        ).model_copy(update={"message": text, "files": []})  # a draft never carries a file
        try:
            self._outbox.write(payload)
        except OSError as exc:  # a preview is a courtesy: the turn goes on, its result is delivered anyway
            log.warning("cannot write a preview of run %s: %s", self._run.runId, exc)
