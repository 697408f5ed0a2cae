"""What a run tells its conversation (result, question), delivered once: as the waiting reply, else pushed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.aio import wait_event
from gateway.api import LateDeadLetter, Outbox
from gateway.home import Home
from gateway.models import IncomingPayload, OutgoingPayload
from gateway.telemetry.events import now_ms, utc_now_iso
from orchestrator.agents.streaming import stream_key
from orchestrator.runs.base import RunStoreBase
from orchestrator.runs.state import RunState

log = logging.getLogger("switchyard.orchestrator.results")

SYSTEM_AGENT = "switchyard"
POLL_SEC = 0.25
BURY_RETRY_SEC = (0.5, 60.0)  # first and longest wait before dead-lettering a refused run's message again


def result_text(run: RunState) -> str:
    """What a finished run tells the conversation: its answer, or why it failed or stopped."""
    last = run.last_step()
    if run.state == "done":
        output = (last[1].output or "").strip() if last else ""
        return output or f"Run {run.runId} (workflow {run.workflowId}) finished."
    if run.state == "cancelled":
        return f"Run {run.runId} (workflow {run.workflowId}) was cancelled."
    error = run.error or "unknown error"
    where = ""
    if last and last[1].status == "failed":
        where = f" at step {last[0]}"
        error = error.removeprefix(f"step {last[0]}: ")
    return f"Run {run.runId} (workflow {run.workflowId}) failed{where}: {error}"


def user_texts(run: RunState) -> list[str]:
    """What people wrote into a run: the message that started it, its input, the answers to its questions
    (a `[send_file: …]` tag among them never sends a file when an agent repeats it)."""
    answers = [step.output or "" for step in run.steps.values() if step.kind == "input"]
    return [str(run.message.get("message", "")), *_strings(run.input), *answers]


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return [value] if isinstance(value, str) else []


def result_reply(run: RunState, to: IncomingPayload | None = None) -> OutgoingPayload:
    """The payload carrying a finished run's result, its final state (`runState`) and its `job` fields;
    `streamKey` names the run's streamed answer, whose preview a channel edits into this reply (not for a
    cancelled run: what `/stop` stopped stays as far as it was written)."""
    last = run.last_step()
    step_id = last[0] if last else run.currentStep
    agent = (last[1].agent or last[0]) if last and run.state == "done" else SYSTEM_AGENT
    return OutgoingPayload.reply_to(to or run.payload(), result_text(run), agent=agent, timestamp=now_ms(),
                                    quoted=user_texts(run),
                                    workflowRunId=run.runId, workflowStepId=step_id, runState=run.state,
                                    job=run.job.model_dump(mode="json", exclude_none=True),
                                    streamKey=stream_key(run) if run.state != "cancelled" else None)


def prompt_reply(run: RunState, step_id: str, prompt: str, to: IncomingPayload | None = None) -> OutgoingPayload:
    """The payload asking the conversation an `input` step's question."""
    text = f"{prompt}\n(run {run.runId} waits for your answer; reply in this conversation)"
    return OutgoingPayload.reply_to(to or run.payload(), text, agent=SYSTEM_AGENT, timestamp=now_ms(),
                                    workflowRunId=run.runId, workflowStepId=step_id, runState=run.state)


@dataclass
class _Waiting:
    """Messages waiting for a run's result (or question) to become their reply."""

    event: asyncio.Event = field(default_factory=asyncio.Event)
    count: int = 0
    run: RunState | None = None  # the run as handed over (written just before): the waiters' reply
    let_go: bool = False  # the run asked something another message answers: the waiters are acknowledged


class Delivery:
    """Hands a run's result or question to a waiting message, or pushes it; records which was done.

    A refused run (a permanent failure) whose result is pushed had its message answered with an ack:
    that message is dead-lettered too (`dead_letter`, given by the gateway), as a waiting one is, so
    every permanent failure is in `dead list`; the push is recorded only once it is.
    """

    def __init__(self, store: RunStoreBase, outbox: Outbox, home: Home,
                 here: Callable[[str], bool] = lambda run_id: False, dead_letter: LateDeadLetter | None = None):
        self._store = store
        self._here = here  # whether a run executes (or waits in hand) in this process: no need to poll it
        self._outbox = outbox
        self._home = home
        self._waiting: dict[str, _Waiting] = {}
        self._asking: set[str] = set()  # runs whose waiting messages a question let go (until they end)
        # runs whose result was being pushed when a write failed: the outbox may hold it (a commit whose
        # answer was lost), so the next try looks before writing it again
        self._pushing: set[str] = set()
        self._dead_letter = dead_letter

    async def outcome(self, run_id: str, timeout_sec: float, current: RunState | None = None) -> RunState | None:
        """Waits up to `timeout_sec` for the run to end or ask; returns it then, else None. `current`: the
        run as the caller has just read or written it (no await since), instead of reading it again."""
        run = current if current is not None else self._store.load(run_id)
        if run is None or self._settled(run):
            return run
        waiting = self._waiting.setdefault(run_id, _Waiting())
        waiting.count += 1
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_sec
        try:
            while not waiting.event.is_set() and (remaining := deadline - loop.time()) > 0:
                if not await wait_event(waiting.event, min(POLL_SEC, remaining)) and not self._here(run_id):
                    current = self._store.load(run_id)  # another process may have settled it
                    if current is not None and self._settled(current):
                        return current
        finally:
            waiting.count -= 1
            if not waiting.event.is_set() and waiting.count == 0:
                self._waiting.pop(run_id, None)
        if not waiting.event.is_set() or waiting.let_go:
            return None
        return waiting.run if waiting.run is not None else self._store.load(run_id)

    def let_go(self, run_id: str) -> None:
        """The run asks its conversation something a later message of it answers (a tool approval by
        number): the messages waiting for the run stop waiting now — the question is their answer, and the
        run's result is pushed — so that answer is not held behind them for `reply_within_sec`."""
        waiting = self._waiting.pop(run_id, None)
        if waiting is not None:
            waiting.let_go = True
            waiting.event.set()
            self._asking.add(run_id)

    def asking(self, run_id: str) -> bool:
        """Whether the run's waiting messages were let go for a question it asked (they need no other reply)."""
        return run_id in self._asking

    @staticmethod
    def _settled(run: RunState) -> bool:
        if run.finished:
            return run.delivery is not None
        step = run.steps.get(run.currentStep or "")
        return run.state == "waiting_input" and step is not None and bool((step.model_extra or {}).get(
            "promptDelivery"))

    def record(self, run: RunState, *, told: bool = False) -> tuple[RunState, _Waiting | None, bool]:
        """Decides a finished run's delivery — `told` for a run cancelled by a message whose reply says so
        (`told`: its conversation's `/stop`), else `reply` when messages wait for it (they are then handed
        the result by `hand_over`), else none yet (`hand_over` pushes it) — and writes the run (fsynced),
        except a run whose delivery is decided that the store keeps whole when it settles (the file
        store's archive line): then that line is its final write (Lifecycle._finish). The flag says
        whether it was written here. Messages waiting for a told run are handed it too (and answer nothing).
        The waiters are let go of only once the run is written: a write the store refused is tried again
        (RunExecutor._stored) with them."""
        waiting = self._waiting.get(run.runId)
        if waiting is not None and waiting.count == 0:
            waiting = None
        decided = "told" if told and run.state == "cancelled" else "reply" if waiting is not None else None
        written = True
        if decided is None:
            run = self._store.save(run)
        else:
            run = run.model_copy(update={"delivery": decided, "updatedAt": utc_now_iso()})
            written = not self._store.settles_whole(run.runId)
            if written:
                run = self._store.save(run)
        self._waiting.pop(run.runId, None)
        self._asking.discard(run.runId)
        return run, waiting, written

    def hand_over(self, run: RunState, waiting: _Waiting | None) -> RunState:
        """Delivers a finished run's result once, as `record` decided: to the waiting messages, else pushed
        (nothing for a told run)."""
        if waiting is not None:
            waiting.run = run
            waiting.event.set()
            return run
        if run.delivery == "told":
            return run
        return self.push(run)

    def push(self, run: RunState, *, recovering: bool = False) -> RunState:
        """Writes the result into the outbox and records `delivery: push` (retried at the next start).
        When `recovering`, a result the outbox already holds (the process died between writing it
        and recording it) is recorded, not written again."""
        try:
            if not ((recovering or run.runId in self._pushing) and self._in_outbox(run)):
                self._pushing.add(run.runId)
                self._outbox.write(result_reply(run))
        except Exception as exc:
            if self._store.transient(exc):
                raise  # the store is away: the write is tried again (RunExecutor._stored), never lost
            log.exception("cannot push the result of run %s; it is retried at the next start", run.runId)
            return run
        if run.refused and not self._bury(run):
            return run
        pushed = self._store.save(run.model_copy(update={"delivery": "push"}))
        self._pushing.discard(run.runId)
        return pushed

    def _bury(self, run: RunState, attempt: int = 0) -> bool:
        """Dead-letters a refused run's message (already answered with an ack); False when it must wait:
        then it is tried again soon (the push is not repeated), and at the next start at the latest."""
        if self._dead_letter is None:
            return True
        reason = f"run {run.runId}: {run.error}"
        try:
            name = self._dead_letter(run.payload(), reason, [reason])
        except Exception:
            log.exception("cannot dead-letter the message of run %s; tried again", run.runId)
            name = None
        if name is not None:
            log.error("dead letter: the message of run %s is %s: %s", run.runId, name, reason)
            return True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        delay = min(BURY_RETRY_SEC[0] * 2 ** attempt, BURY_RETRY_SEC[1])
        loop.call_later(delay, self._bury_again, run.runId, attempt + 1)
        return False

    def _bury_again(self, run_id: str, attempt: int) -> None:
        """`_bury` once more for a pushed refused run not yet recorded (a run replaced meanwhile is left)."""
        try:
            run = self._store.load(run_id)
            if run is not None and run.refused and run.delivery is None and self._bury(run, attempt):
                self._store.save(run.model_copy(update={"delivery": "push"}))
        except Exception:  # the run store is away: tried again, as a refusal of the dead-lettering is
            log.exception("cannot dead-letter the message of run %s; tried again", run_id)
            delay = min(BURY_RETRY_SEC[0] * 2 ** attempt, BURY_RETRY_SEC[1])
            asyncio.get_running_loop().call_later(delay, self._bury_again, run_id, attempt + 1)

    def _in_outbox(self, run: RunState) -> bool:
        """Tells whether the outbox holds this run's result (gateway.api.Outbox.holds_result)."""
        started = run.payload()
        return self._outbox.holds_result(run.runId, run.state, channel=started.channel, message_id=started.messageId)

    def asked(self, run: RunState, step_id: str, prompt: str) -> RunState:
        """Delivers an input step's question once: as a waiting message's reply, else pushed."""
        waiting = self._waiting.get(run.runId)
        if waiting is not None and waiting.count > 0:
            run = waiting.run = self._store.update_step(run, step_id, promptDelivery="reply")
            self._waiting.pop(run.runId, None)
            waiting.event.set()
            return run
        self._waiting.pop(run.runId, None)
        try:
            if not (run.runId in self._pushing and self._in_outbox(run)):
                self._pushing.add(run.runId)
                self._outbox.write(prompt_reply(run, step_id, prompt))
        except Exception as exc:
            if self._store.transient(exc):
                raise  # tried again with the run's pause (RunExecutor._stored)
            log.exception("cannot ask the question of run %s; it is retried at the next start", run.runId)
            return run
        asked = self._store.update_step(run, step_id, promptDelivery="push")
        self._pushing.discard(run.runId)
        return asked
