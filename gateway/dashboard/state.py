"""What the dashboard shows: recent activity kept from the event stream (the queue is its backend's
gateway.backends.runtime.QueueView: gateway/spool/folders.py reads the home's folders,
gateway/backends/postgres/dashboard.py the database)."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

EVENT_HISTORY = 200
HEARTBEAT_HISTORY = 120
SETTLED = ("job.succeeded", "job.failed.final", "job.requeued", "message.duplicate")


class Activity:
    """Recent events, heartbeat round trips, per-profile traffic and the messages in flight.

    Fed by the event log's observer, which may run on any thread; readers get copies.
    """

    def __init__(self) -> None:
        self.events: deque[dict[str, Any]] = deque(maxlen=EVENT_HISTORY)
        self.heartbeats: dict[str, deque[dict[str, Any]]] = {}
        self.profiles: dict[str, dict[str, Any]] = {}
        self._in_flight: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def seed(self, events: Iterable[dict[str, Any]]) -> None:
        """Replays past events (the tail of the log) for history; nothing from them is in flight."""
        for event in events:
            self.observe(event)
        with self._lock:
            self._in_flight.clear()

    def observe(self, event: dict[str, Any]) -> None:
        """Takes one event of the gateway's event log into account."""
        name = str(event.get("event"))
        with self._lock:
            self.events.append(event)
            if name == "message.claimed":
                self._claimed(event)
            elif name in SETTLED and event.get("kind", "message") == "message":
                self._in_flight.pop(str(event.get("job_id")), None)
            elif name in ("heartbeat.ok", "heartbeat.alert"):
                history = self.heartbeats.setdefault(str(event.get("profile")), deque(maxlen=HEARTBEAT_HISTORY))
                history.append({"ts": event.get("ts"), "rtt_ms": event.get("rtt_ms"), "ok": name == "heartbeat.ok"})
            elif name == "outgoing.sent":
                self._profile(event)["last_outbound"] = event.get("ts")
            elif name == "outgoing.retry":
                counts = self._profile(event)
                counts["retries"] += 1
                counts["rate_limited"] += 1 if event.get("rate_limited") else 0

    def _claimed(self, event: dict[str, Any]) -> None:
        self._profile(event)["last_inbound"] = event.get("ts")
        self._in_flight[str(event.get("job_id"))] = {
            "name": event.get("job_id"), "channel": event.get("channel"), "profile": event.get("profile"),
            "conversation": event.get("conversation"), "attempt": event.get("attempt"),
            "claimed_at": event.get("ts"), "since": time.monotonic()}

    def _profile(self, event: dict[str, Any]) -> dict[str, Any]:
        key = str(event.get("profile") or event.get("channel"))
        return self.profiles.setdefault(key, {"last_inbound": None, "last_outbound": None, "retries": 0,
                                              "rate_limited": 0})

    def in_flight(self, present: set[str] | None = None) -> list[dict[str, Any]]:
        """The messages claimed and not yet settled, oldest first, with their elapsed seconds; those no
        longer in `processing/` (when `present` names what is) are forgotten."""
        now = time.monotonic()
        with self._lock:
            if present is not None:
                for name in [n for n in self._in_flight if n not in present]:
                    del self._in_flight[name]
            jobs = sorted(self._in_flight.values(), key=lambda job: job["since"])
            return [{**{k: v for k, v in job.items() if k != "since"}, "elapsed_s": round(now - job["since"], 1)}
                    for job in jobs]

    def recent_events(self, limit: int) -> list[dict[str, Any]]:
        """The last `limit` events, newest first."""
        with self._lock:
            return list(self.events)[-limit:][::-1]

    def heartbeat_history(self) -> dict[str, list[dict[str, Any]]]:
        """Each heartbeat profile's recent round trips, oldest first."""
        with self._lock:
            return {profile: list(points) for profile, points in self.heartbeats.items()}

    def last_rtt_ms(self) -> dict[str, float]:
        """Each heartbeat profile's last round trip in milliseconds."""
        with self._lock:
            return {p: float(h[-1]["rtt_ms"]) for p, h in self.heartbeats.items()
                    if h and isinstance(h[-1]["rtt_ms"], int | float)}

    def profile_counts(self, profile: str) -> dict[str, Any]:
        """A channel profile's last inbound/outbound times and its retry and rate-limit (429) counts."""
        with self._lock:
            return dict(self.profiles.get(profile) or {"last_inbound": None, "last_outbound": None,
                                                       "retries": 0, "rate_limited": 0})
