"""The one exponential backoff schedule: how long to wait before attempt N."""

from __future__ import annotations

import random

_MAX_EXPONENT = 64  # beyond this every usable cap is reached; keeps 2**n from overflowing a float


def delay(attempt: int, initial: float, cap: float, *, jitter: tuple[float, float] | None = None) -> float:
    """The wait before attempt `attempt` (counted from 1; 0 counts as 1): `initial` doubled per attempt
    after the first, at most `cap`, then multiplied by a random factor in `jitter` and kept within `cap`.

    Returned in the unit of `initial` and `cap`; `cap` may be `math.inf` for no cap.
    """
    exponent = min(max(0, attempt - 1), _MAX_EXPONENT)
    wait = min(initial * 2.0**exponent, cap)
    if jitter is None:
        return wait
    low, high = jitter
    if not 0 <= low <= high:
        raise ValueError(f"jitter must be an ordered range of non-negative factors, got {jitter}")
    return min(wait * random.uniform(low, high), cap)
