"""The one exponential backoff schedule: how long to wait before attempt N."""

from __future__ import annotations

import random

RETRY_INITIAL_S = 1.0  # a channel's start, and a task a plugin runs through ChannelContext.supervise, are retried
RETRY_MAX_S = 300.0  # 1 s doubling to 5 min, jittered (docs/channels.md)
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
