"""diagnostics_investigate: bounded context (run, events, stderr tails, queue depths) for an agent."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gateway.home import Home
from gateway.models import IncomingPayload
from gateway.scope import ConversationScope
from gateway.telemetry.events import read_events
from orchestrator.agents.providers import ProviderRunner
from orchestrator.agents.request import TurnRequest
from orchestrator.agents.spawn import ProviderFailed
from orchestrator.config.loading import LoadedConfig, read_template
from orchestrator.execution.templates import render
from orchestrator.runs.state import RunState
from orchestrator.usage.meter import LimitReached
from orchestrator.usage.records import Payer

log = logging.getLogger("switchyard.orchestrator.diagnostics")

CONTEXT_CAP = 16384
EVENT_CAP = 1024
RECENT_EVENTS = 200
FIELD_CAP = 1000

DEFAULT_DIAGNOSTICS_PROMPT = """\
You are the diagnostics agent of a chat gateway that runs agent workflows. Answer the question
from the context below (JSON: the run's state and steps with stderr tails, recent events, queue
depths). Give your findings first, then a short list of next-step options for the user.
Do not change anything.

Question: {{question}}

Context:
{{contextJson}}
"""


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, default=str).encode())


def _tail(text: str | None, limit: int = FIELD_CAP) -> str | None:
    return text if text is None or len(text) <= limit else "…" + text[-limit:]


def run_digest(run: RunState) -> dict[str, Any]:
    """A run's state with each step's status, error and the ends of its output and stderr."""
    steps = {
        name: {"status": s.status, "exitCode": s.exitCode, "error": _tail(s.error),
               "startedAt": s.startedAt, "finishedAt": s.finishedAt, "stderrTail": _tail(s.stderrTail),
               "outputTail": _tail(s.output, 500)}
        for name, s in run.steps.items()
    }
    return {**run.summary(), "createdAt": run.createdAt, "error": run.error, "steps": steps}


def _small_event(event: dict[str, Any]) -> dict[str, Any]:
    if _size(event) <= EVENT_CAP:
        return event
    keep = ("ts", "event", "job_id", "state", "channel", "conversation")
    small = {k: event[k] for k in keep if k in event}
    small["reason"] = str(event.get("reason", ""))[:300]
    return small


GLOBAL_EVENTS = frozenset({"provider.missing", "provider.acp_fallback", "orchestrator.invalid"})
"""Events about no conversation that may explain any silence (a missing CLI, a broken orchestrator.yaml)."""


def _relevant(event: dict[str, Any], run: RunState | None, message: IncomingPayload) -> bool:
    """True for an event of the asking conversation: of its run, or naming its channel, profile (when
    the event has one) and conversation; or a global event in GLOBAL_EVENTS. Never another
    conversation's: their failures quote their messages."""
    if run is not None and run.runId in (event.get("job_id"), event.get("run_id")):
        return True
    if "conversation" not in event and "job_id" not in event:
        return event.get("event") in GLOBAL_EVENTS
    return (event.get("channel") == message.channel and event.get("conversation") == message.conversation
            and event.get("profile", message.profile) == message.profile)


def gather_context(
    events_file: Path, run: RunState | None, message: IncomingPayload,
    queue_stats: Callable[[], dict[str, Any]], limit: int = CONTEXT_CAP,
) -> dict[str, Any]:
    """The diagnostics context, at most `limit` bytes of JSON: newest events are kept first. `run` must
    be the asking conversation's own (or None); only that conversation's events are read."""
    try:
        queue = queue_stats()
    except Exception as exc:
        queue = {"error": f"queue figures unavailable: {exc}"}
    context: dict[str, Any] = {"run": run_digest(run) if run else None, "queue": queue, "events": []}
    if _size(context) > limit:
        context["run"] = run.summary() if run else None
    recent = [e for e in read_events(events_file, limit=RECENT_EVENTS) if _relevant(e, run, message)]
    budget = limit - _size(context)
    kept: list[dict[str, Any]] = []
    for event in reversed(recent):
        small = _small_event(event)
        cost = _size(small) + 2
        if cost > budget:
            break
        kept.append(small)
        budget -= cost
    context["events"] = list(reversed(kept))
    return context


class Diagnostics:
    """Runs the diagnostics agent on a question; it reads state and advances nothing."""

    def __init__(self, home: Home, runner: ProviderRunner, queue_stats: Callable[[], dict[str, Any]]):
        self._home = home
        self._runner = runner
        self._queue_stats = queue_stats

    async def investigate(
        self, question: str, message: IncomingPayload, run: RunState | None, loaded: LoadedConfig,
        request_id: str,
    ) -> str:
        """The agent's findings and next-step options (or why it could not answer); raises TurnStopped when
        the conversation's `/stop` stopped it."""
        context = gather_context(self._home.events_file, run, message, self._queue_stats)
        request = {"question": question, "message": message.model_dump(mode="json", exclude_none=True),
                   "context": context}
        settings = loaded.config.diagnostics
        template = DEFAULT_DIAGNOSTICS_PROMPT
        if settings.prompt:
            template = read_template(settings.prompt, loaded.workspace)
        context_json = json.dumps(context, indent=1, default=str)
        prompt = render(template, {"question": question, "contextJson": context_json})
        request_file = self._home.root / "orchestrator" / "diagnostics" / f"{request_id}.json"
        payer = None if self._runner.in_process(settings.provider) else Payer.of(message)
        try:
            result = await self._runner.run(settings.provider, TurnRequest(
                prompt, loaded.workspace, request=request, request_file=request_file, mode="answer",
                stopped_by=ConversationScope.of(message).key, payer=payer))
        except ProviderFailed as exc:
            return f"The diagnostics agent failed: {exc}"
        except LimitReached as exc:
            return str(exc)
        return result.stdout.strip() or "The diagnostics agent gave no answer."
