"""What the dashboard shows: recent activity kept from the event stream, and the queue as its backend
keeps it (FolderView reads the home's folders; gateway/backends/postgres/dashboard.py the database)."""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import Any, Protocol

from gateway.home import Home
from gateway.spool import deadletters

EVENT_HISTORY = 200
HEARTBEAT_HISTORY = 120
QUEUE_FOLDERS = ("incoming", "processing", "outgoing", "failed")
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


class QueueView(Protocol):
    """The queue as the dashboard reads it (on a worker thread) and the retry button.

    `live()` answers `queue` (rows of folder, depth, oldest_age_s) and either `processing` (the names
    in processing/) or `in_flight` (the messages running, as Activity.in_flight lists them); `read`
    adds `dead_letters` (the first `shown`), `dead_total`, and whatever else the backend shows.
    """

    def live(self) -> dict[str, Any]: ...
    def read(self, shown: int) -> dict[str, Any]: ...
    def retry(self, names: list[str]) -> list[str]: ...


class FolderView:
    """The file backend's queue: the home's folders and the dead letters in failed/."""

    def __init__(self, home: Home):
        self.home = home

    def live(self) -> dict[str, Any]:
        queue, processing = queue_folders(self.home)
        return {"queue": queue, "processing": processing}

    def read(self, shown: int) -> dict[str, Any]:
        letters = deadletters.list_dead(self.home, read_payloads=False)  # each refresh: metadata only
        return {**self.live(), "dead_total": len(letters),
                "dead_letters": [{k: v for k, v in letter.to_json().items() if k != "path"}
                                 for letter in letters[:shown]]}

    def retry(self, names: list[str]) -> list[str]:
        """Puts dead letters back into the queue (KeyError naming any that is not one)."""
        return deadletters.retry(self.home, names)


def queue_folders(home: Home) -> tuple[list[dict[str, Any]], set[str]]:
    """Depth and age of the oldest file of each queue folder (plus `sent/`'s depth), and the names of
    the files in `processing/`."""
    now = time.time()
    folders = []
    processing: set[str] = set()
    for name in QUEUE_FOLDERS:
        root = getattr(home, name)
        entries = _payload_entries(root, recursive=name == "processing")
        if name == "processing":
            processing = {entry.name for entry in entries}
        mtimes = [mtime for mtime in (_mtime(entry) for entry in entries) if mtime is not None]
        folders.append({"folder": name, "depth": len(entries),
                        "oldest_age_s": round(now - min(mtimes), 1) if mtimes else None})
    folders.append({"folder": "sent", "depth": len(_payload_entries(home.sent, recursive=False)),
                    "oldest_age_s": None})
    return folders, processing


def _payload_entries(folder: str | os.PathLike[str], *, recursive: bool) -> list[os.DirEntry[str]]:
    found: list[os.DirEntry[str]] = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if recursive and entry.is_dir(follow_symlinks=False):
                    found.extend(_payload_entries(entry.path, recursive=False))
                elif entry.name.endswith(".json") and not entry.name.endswith(".error.json"):
                    found.append(entry)
    except (FileNotFoundError, NotADirectoryError):
        pass
    return found


def _mtime(entry: os.DirEntry[str]) -> float | None:
    try:
        return entry.stat(follow_symlinks=False).st_mtime
    except OSError:
        return None
