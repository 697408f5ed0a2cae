"""The job lifecycle of spec 003: states, the transition table, failure categories, retries and backoff."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from gateway.channelkit.backoff import delay as backoff_delay
from gateway.models import Job
from orchestrator.runs.jobstates import FINISHED as FINISHED  # re-exported: the run store and tests import them here
from orchestrator.runs.jobstates import TRANSITIONS as TRANSITIONS
from orchestrator.runs.jobstates import JobState as JobState

FailureCategory = Literal["retryable", "transient", "fatal"]


class IllegalTransition(Exception):
    """A job was asked to move between states the transition table does not connect."""


def check_transition(job_id: str, current: str, target: str) -> None:
    """Raises IllegalTransition unless the table allows `current -> target`."""
    if target not in TRANSITIONS.get(current, frozenset()):
        raise IllegalTransition(f"run {job_id}: {current} -> {target} is not allowed")


class JobInfo(Job):
    """The spec-003 job fields kept in state.json under `job` (snake_case, as the spec names them): the
    fields of the channel's job (gateway.Job: repo, branch, slug, …) plus the run's lifecycle."""

    retries: int = 0
    max_retries: int = 0
    next_retry_at: str | None = None
    failure_reason: str | None = None
    failure_category: FailureCategory | None = None
    owner: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    duration_ms: int | None = None


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how late a failed job is queued again."""

    max_retries: int = 0
    backoff_sec: float = 5.0
    backoff_max_sec: float = 300.0

    def allows(self, category: FailureCategory, retries: int) -> bool:
        """Tells whether a failure of this category after `retries` retries is queued again."""
        return category != "fatal" and retries < self.max_retries

    def delay_sec(self, retries: int) -> float:
        """The wait before retry number `retries + 1`: doubling from backoff_sec, capped."""
        return backoff_delay(retries + 1, self.backoff_sec, self.backoff_max_sec)


def iso(moment: datetime) -> str:
    """UTC ISO 8601 with milliseconds and a Z, as every timestamp in state.json."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_iso(text: str) -> datetime:
    """Reads a timestamp written by `iso` (or any ISO 8601 with an offset)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def iso_in(seconds: float) -> str:
    """The moment `seconds` from now."""
    return iso(datetime.now(UTC) + timedelta(seconds=seconds))


def is_due(next_retry_at: str | None) -> bool:
    """Tells whether a job waiting out a backoff may run now."""
    if not next_retry_at:
        return True
    try:
        return parse_iso(next_retry_at) <= datetime.now(UTC)
    except ValueError:
        return True


def seconds_until(next_retry_at: str | None) -> float:
    """Seconds until a backoff ends (0 when it already did)."""
    if not next_retry_at:
        return 0.0
    try:
        return max(0.0, (parse_iso(next_retry_at) - datetime.now(UTC)).total_seconds())
    except ValueError:
        return 0.0


def ms_between(start: str | None, end: str) -> int | None:
    """Milliseconds from one recorded timestamp to another, if both can be read."""
    if not start:
        return None
    try:
        return int((parse_iso(end) - parse_iso(start)).total_seconds() * 1000)
    except ValueError:
        return None
