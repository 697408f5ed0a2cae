"""The job states of spec 003 and the table of allowed transitions (no pydantic: `status` reads them)."""

from __future__ import annotations

from typing import Literal

JobState = Literal["queued", "running", "waiting_input", "done", "failed", "failed_final", "cancelled"]

# queued → running → done | failed → queued (retry) | failed_final, plus:
# running → waiting_input → queued (an input step got its answer),
# running → queued (the process stopped or died mid-run; resumed from the last completed step),
# queued | running | waiting_input → cancelled (/cancel, cancel_run).
TRANSITIONS: dict[str, frozenset[str]] = {
    "queued": frozenset({"running", "cancelled"}),
    "running": frozenset({"done", "failed", "waiting_input", "queued", "cancelled"}),
    "waiting_input": frozenset({"queued", "cancelled"}),
    "failed": frozenset({"queued", "failed_final"}),
    "done": frozenset(),
    "failed_final": frozenset(),
    "cancelled": frozenset(),
}
FINISHED = frozenset(state for state, targets in TRANSITIONS.items() if not targets)
