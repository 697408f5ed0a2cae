"""Progress text of runs: the `/status` snapshot (the `switchyard runs` table is in orchestrator/runs/listing.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from orchestrator.runs.jobs import parse_iso
from orchestrator.runs.state import RunState, StepState, finished_at

MARKS = {"completed": "✓", "running": "▶", "waiting": "?", "pending": "·", "failed": "✗"}


def elapsed_text(run: RunState) -> str:
    """How long the run has existed (until it finished), e.g. `1m05s`."""
    try:
        start = parse_iso(run.createdAt)
        end = parse_iso(run.job.finished_at) if run.finished and run.job.finished_at else datetime.now(UTC)
    except ValueError:
        return "?"
    seconds = max(0, int((end - start).total_seconds()))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def ago_text(moment: datetime, now: datetime | None = None) -> str:
    """How long ago `moment` was, roughly: `just now`, `40 s ago`, `2 min ago`, `3 h ago`, `5 days ago`."""
    seconds = max(0, int(((now or datetime.now(UTC)) - moment).total_seconds()))
    if seconds < 1:
        return "just now"
    for unit, size in (("day", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            count = seconds // size
            return f"{count} {unit}{'s' if unit == 'day' and count != 1 else ''} ago"
    return f"{seconds} s ago"


def last_run_text(run: RunState) -> str:
    """The line `/status` adds about the conversation's last run once it ended, e.g.
    `Last run: r-… (workflow chat) done 2 min ago.`"""
    how: str = "failed" if run.state in ("failed", "failed_final") else run.state
    failed = [name for name, step in run.steps.items() if step.status == "failed"]
    if how == "failed" and failed:
        how += f" at step {failed[-1]}"
    ended = finished_at(run)
    return f"Last run: {run.runId} (workflow {run.workflowId}) {how}{' ' + ago_text(ended) if ended else ''}."


def _step_detail(step: StepState) -> str:
    extra = step.model_extra or {}
    if step.status == "failed" and step.error:
        return f": {step.error}"
    if step.status == "waiting" and extra.get("prompt"):
        return f": waiting for your answer to {str(extra['prompt'])[:200]!r}"
    items = extra.get("items")
    if isinstance(items, list) and items:
        done = sum(1 for item in items if isinstance(item, dict) and item.get("status") == "completed")
        return f" ({done}/{len(items)} items)"
    if "poll_count" in extra and step.status in ("completed", "running"):
        return f" ({len(extra.get('files') or [])} file(s), {extra['poll_count']} poll(s))"
    if step.status == "completed" and step.durationMs is not None:
        return f" ({step.durationMs / 1000:.1f}s)"
    return ""


def snapshot(run: RunState, last_event: dict[str, Any] | None = None) -> str:
    """The progress text: state, current step, retries, elapsed time, each step, and the last event."""
    names = list(run.steps)
    head = f"Run {run.runId} (workflow {run.workflowId}): {run.state}"
    if not run.finished and run.currentStep in run.steps:
        head += f", step {names.index(run.currentStep) + 1}/{len(names)} {run.currentStep}"
    if run.job.retries or run.job.max_retries:
        head += f", retries {run.job.retries}/{run.job.max_retries}"
    if run.state == "queued" and run.job.next_retry_at:
        head += f", next try at {run.job.next_retry_at}"
    head += f", elapsed {elapsed_text(run)}"
    lines = [head]
    lines += [f"  {MARKS.get(step.status, '·')} {name}{_step_detail(step)}" for name, step in run.steps.items()]
    if run.finished and run.error and not any(s.status == "failed" for s in run.steps.values()):
        lines.append(f"  error: {run.error}")
    if last_event is not None:
        lines.append(f"Last event: {_event_text(last_event)}")
    return "\n".join(lines)


def _event_text(event: dict[str, Any]) -> str:
    what = str(event.get("event", "?"))
    detail = event.get("step") or event.get("state") or ""
    return f"{what} {detail} at {event.get('ts', '?')}".replace("  ", " ")
