"""The `wait_for` step (spec 000): poll a glob in the workspace until enough files match, or time out."""

from __future__ import annotations

import asyncio
import glob
import json
import os
import time
from pathlib import Path

from orchestrator.execution.steps.base import StepFailed, StepJob, StepOutcome
from orchestrator.execution.steps.values import template_values
from orchestrator.execution.templates import render

TIMEOUT_EXIT = 124


def matching_files(workspace: Path, pattern: str) -> list[str]:
    """Files matching `pattern` (relative to the workspace unless absolute), sorted; `*.tmp` is skipped."""
    if os.path.isabs(pattern):
        found = glob.glob(pattern, recursive=True)
        files = [p for p in found if os.path.isfile(p)]
    else:
        found = glob.glob(pattern, root_dir=workspace, recursive=True)
        files = [p for p in found if (workspace / p).is_file()]
    return sorted(p for p in files if not p.endswith(".tmp"))


def _waited_before(job: StepJob) -> float:
    """Seconds this attempt of the step already waited before the process running it stopped.

    The start of the wait is checkpointed (`waitSince`, wall clock, with the job's retry count),
    so a run resumed after a restart keeps its deadline; a retry (a new attempt) starts afresh.
    """
    extra = job.run.steps[job.step.id].model_extra or {}
    since, retry = extra.get("waitSince"), extra.get("waitRetry")
    if isinstance(since, (int, float)) and retry == job.run.job.retries:
        return max(0.0, time.time() - since)
    job.progress({"waitSince": time.time(), "waitRetry": job.run.job.retries})
    return 0.0


async def wait_for(job: StepJob) -> StepOutcome:
    """Polls every poll_ms; completes with `files`, `wait_duration_ms`, `poll_count`, `timed_out`."""
    config = job.step.wait_for
    assert config is not None
    workspace = job.loaded.workspace
    pattern = render(config.glob, template_values(job.run, str(workspace)))
    started = time.monotonic() - _waited_before(job)
    deadline = started + config.timeout_sec
    polls = 0
    while True:
        polls += 1
        files = await asyncio.to_thread(matching_files, workspace, pattern)
        waited = int((time.monotonic() - started) * 1000)
        fields = {"files": files, "wait_duration_ms": waited, "poll_count": polls, "glob": pattern}
        if len(files) >= config.min_count:
            return StepOutcome(json.dumps(files), 0, waited, fields={**fields, "timed_out": False})
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise StepFailed(
                f"wait_for {pattern}: timed out after {config.timeout_sec:g}s with {len(files)} of "
                f"{config.min_count} file(s)", category=job.failure_category(),
                fields={**fields, "timed_out": True}, exit_code=TIMEOUT_EXIT,
            )
        await asyncio.sleep(min(config.poll_ms / 1000, remaining))
