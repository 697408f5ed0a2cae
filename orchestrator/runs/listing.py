"""What `switchyard runs` lists: runs newest first, filtered by age and state, as table rows."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import get_args

from orchestrator.runs.jobs import JobState, parse_iso
from orchestrator.runs.state import RunState
from orchestrator.runs.status import elapsed_text

STATES: tuple[str, ...] = get_args(JobState)
HEADERS = ("run", "workflow", "state", "step", "retries", "created", "elapsed")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """The moment `--since` names: a duration back from now (`90m`, `2h`, `3d`, `1w`) or an ISO 8601
    date or time (local time unless it carries an offset). Raises ValueError otherwise."""
    match = _DURATION.fullmatch(text.strip().lower())
    if match:
        return (now or datetime.now(UTC)) - timedelta(seconds=float(match[1]) * _UNITS[match[2]])
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is neither a duration (30m, 2h, 3d, 1w) nor an ISO date") from None
    return moment if moment.tzinfo else moment.astimezone()


def parse_states(values: Iterable[str]) -> set[str]:
    """The states `--state` names (repeated or comma-separated); raises ValueError naming an unknown one."""
    states = {part.strip() for value in values for part in value.split(",") if part.strip()}
    unknown = sorted(states - set(STATES))
    if unknown:
        raise ValueError(f"unknown state {', '.join(unknown)}; states: {', '.join(STATES)}")
    return states


def select_runs(runs: Iterable[RunState], *, since: datetime | None = None, states: set[str] | None = None,
                limit: int = 0) -> tuple[list[RunState], int]:
    """The matching runs newest first, cut to `limit` (0: all), and how many matched in all."""
    chosen = [run for run in runs if (not states or run.state in states) and (since is None or _created(run) >= since)]
    chosen.sort(key=lambda run: (run.createdAt, run.runId), reverse=True)
    return (chosen[:limit] if limit > 0 else chosen), len(chosen)


def _created(run: RunState) -> datetime:
    try:
        return parse_iso(run.createdAt)
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)


def table_rows(runs: Sequence[RunState]) -> list[list[str]]:
    """One row per run, in the order of HEADERS."""
    return [[run.runId, run.workflowId, run.state, run.currentStep or "-",
             f"{run.job.retries}/{run.job.max_retries}", run.createdAt, elapsed_text(run)] for run in runs]
