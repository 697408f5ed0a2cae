"""What every step kind shares: the failure it raises, the outcome it returns, the job it is given."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.agents.spawn import ProviderResult
from orchestrator.config.loading import LoadedConfig
from orchestrator.config.models import StepConfig
from orchestrator.runs.jobs import FailureCategory
from orchestrator.runs.state import RunState

Progress = Callable[[dict[str, Any]], None]
"""Saves some fields of the running step's state (a checkpoint inside a long step, e.g. per item)."""


class StepFailed(Exception):
    """A step could not complete; the message says why, `category` whether a retry may help."""

    def __init__(
        self, message: str, result: ProviderResult | None = None, *, category: FailureCategory = "retryable",
        fields: dict[str, Any] | None = None, exit_code: int | None = None,
    ):
        super().__init__(message)
        self.result = result
        self.category: FailureCategory = category
        self.fields = fields or {}
        self.exit_code = exit_code if exit_code is not None else (result.exit_code if result else None)


@dataclass(frozen=True)
class StepOutcome:
    """What a completed step produced; `fields` are extra state fields (spec-000 fragments)."""

    output: str
    exit_code: int | None
    duration_ms: int
    stderr_tail: str = ""
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass
class StepJob:
    """One step being run: the run, its configuration, the process environment and a checkpoint hook."""

    run: RunState
    step: StepConfig
    loaded: LoadedConfig
    env: dict[str, str]
    progress: Progress

    def failure_category(self, default: FailureCategory = "retryable") -> FailureCategory:
        """`fatal` when the step says `on_failure: fatal`, else `default`."""
        return "fatal" if self.step.on_failure == "fatal" else default
