"""The dashboard's per-minute figures of the last 24 hours: a ring of minute buckets in this process, fed by
the events it emits (and, at start, by the tail of its event log) and by samples of the queue.

Why a ring and not a query: the figures cost nothing to keep (one dict update per event, at most 1,440
buckets), need no store of their own, and read the same on every backend. What they cannot show is what this
process did not see: before its start (beyond the log's tail it seeds from), or, on PostgreSQL, the messages
other hosts claimed and the replies they sent (docs/dashboard.md). Queue depth is the backend's own figure,
shared by every host.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

MINUTES = 24 * 60
LATENCIES_KEPT = 2048  # replies timed per minute (a uniform sample of them past that: Vitter's algorithm R)
DEAD = ("job.failed.final", "outgoing.failed", "message.invalid")


@dataclass
class Minute:
    """What happened in one minute."""

    received: int = 0
    replied: int = 0
    dead: int = 0
    timed: int = 0  # replies whose latency was offered (the sample holds up to LATENCIES_KEPT of them)
    latencies_ms: list[float] = field(default_factory=list)
    waiting: int | None = None  # the most messages waiting in the queue seen in this minute
    oldest_s: float | None = None  # the age of the oldest waiting message, the most seen in this minute


class Minutes:
    """Per-minute buckets of the last 24 hours (MINUTES); fed on any thread, read as copies."""

    def __init__(self, clock: Callable[[], float] = time.time, *, rng: random.Random | None = None):
        self._clock = clock
        self._rng = rng or random.Random()
        self._buckets: dict[int, Minute] = {}
        self._lock = threading.Lock()

    def seed(self, events: Iterable[dict[str, Any]]) -> None:
        """Counts past events (the tail of the event log) into the minutes they happened in."""
        for event in events:
            self.observe(event)

    def observe(self, event: dict[str, Any]) -> None:
        """Counts one event into the minute of its `ts`."""
        name = event.get("event")
        if name not in ("message.claimed", "outgoing.sent", "job.succeeded", *DEAD):
            return
        minute = _minute_of(event.get("ts")) or int(self._clock() // 60)
        with self._lock:
            if minute <= self._now_minute() - MINUTES:
                return
            bucket = self._bucket(minute)
            if name == "message.claimed" and event.get("attempt") in (None, 1):
                bucket.received += 1
            elif name == "outgoing.sent":
                bucket.replied += 1
            elif name == "job.succeeded" and event.get("kind") == "message":
                if isinstance(took := event.get("duration_ms"), int | float):
                    self._time(bucket, float(took))
            elif name in DEAD and (name != "job.failed.final" or event.get("kind") == "message"):
                bucket.dead += 1

    def sample_queue(self, rows: Iterable[dict[str, Any]]) -> None:
        """Records the queue as the backend shows it now (rows of folder, depth, oldest_age_s)."""
        waiting = next((row for row in rows if row.get("folder") == "incoming"), None)
        if waiting is None:
            return
        with self._lock:
            bucket = self._bucket(self._now_minute())
            bucket.waiting = max(bucket.waiting or 0, int(waiting.get("depth") or 0))
            if isinstance(age := waiting.get("oldest_age_s"), int | float):
                bucket.oldest_s = max(bucket.oldest_s or 0.0, float(age))
            elif bucket.oldest_s is None:
                bucket.oldest_s = 0.0

    def series(self) -> dict[str, Any]:
        """The last 24 hours, one entry per minute that has any figure: `start` and `end` (epoch minutes) and
        `minutes`, a list of {minute, in, out, dead, p50_ms, p99_ms, waiting, oldest_s}, oldest first."""
        with self._lock:
            end = self._now_minute()
            start = end - MINUTES + 1
            for old in [m for m in self._buckets if m < start]:
                del self._buckets[old]
            rows = [{"minute": minute, "in": b.received, "out": b.replied, "dead": b.dead,
                     "p50_ms": _percentile(b.latencies_ms, 50), "p99_ms": _percentile(b.latencies_ms, 99),
                     "waiting": b.waiting, "oldest_s": b.oldest_s}
                    for minute, b in sorted(self._buckets.items())]
        return {"start": start, "end": end, "minutes": rows}

    def _now_minute(self) -> int:
        return int(self._clock() // 60)

    def _bucket(self, minute: int) -> Minute:
        bucket = self._buckets.get(minute)
        if bucket is None:
            bucket = self._buckets[minute] = Minute()
        return bucket

    def _time(self, bucket: Minute, took_ms: float) -> None:
        bucket.timed += 1
        if len(bucket.latencies_ms) < LATENCIES_KEPT:
            bucket.latencies_ms.append(took_ms)
        elif (slot := self._rng.randrange(bucket.timed)) < LATENCIES_KEPT:
            bucket.latencies_ms[slot] = took_ms


def _minute_of(ts: object) -> int | None:
    """The epoch minute of an event's ISO `ts`, or None when it has none."""
    if not isinstance(ts, str):
        return None
    try:
        return int(datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() // 60)
    except ValueError:
        return None


def _percentile(values: list[float], percent: int) -> float | None:
    """The nearest-rank percentile of `values` (None for none)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-percent * len(ordered) // 100))
    return ordered[rank - 1]
