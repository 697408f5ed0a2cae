"""In-memory answered index, pairing, locks, delivery journal and event sink (gateway/stores.py)."""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gateway.channelkit.access import EXPIRED_KEPT_S, PairingCodeExpired, new_code
from gateway.models import IncomingPayload
from gateway.payloads import message_identity
from gateway.settings import DEFAULT_PAIRING_CODE_TTL_S
from gateway.telemetry.events import utc_now_iso


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class AnsweredState:
    """Answered identities → when they were answered, shared by the MemoryAnswered handles on it."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    seen: dict[str, float] = field(default_factory=dict)


class MemoryAnswered:
    """The answered index (gateway.stores.AnsweredStore): identities kept for `window_sec`."""

    def __init__(self, state: AnsweredState, *, window_sec: float):
        self.state = state
        self.window_sec = window_sec

    def contains(self, message: IncomingPayload) -> bool:
        with self.state.lock:
            stamp = self.state.seen.get(message_identity(message))
        return stamp is not None and stamp >= time.time() - self.window_sec

    def record(self, message: IncomingPayload) -> None:
        with self.state.lock:
            self.state.seen[message_identity(message)] = time.time()

    def forget(self, message: IncomingPayload) -> None:
        with self.state.lock:
            self.state.seen.pop(message_identity(message), None)

    def close(self) -> None:
        """Nothing held open."""


class MemoryPairing:
    """Pending codes and approved senders (gateway.channelkit.access.Pairing), with the file store's rules: one
    pending code per sender and profile, replaced once expired, kept EXPIRED_KEPT_S after expiry so
    `approve` can say it expired."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, dict[str, Any]] = {}
        self._approved: dict[str, list[str]] = {}

    def twin(self) -> MemoryPairing:
        """A second handle on the same codes and senders (another host)."""
        other = MemoryPairing()
        other._lock, other._pending, other._approved = self._lock, self._pending, self._approved
        return other

    def read(self) -> dict[str, Any]:
        now = time.time()
        with self._lock:
            pending = {code: {**{k: v for k, v in entry.items() if k != "expires"},
                              "expires_at": _iso(entry["expires"]), "expires_in_s": entry["expires"] - now}
                       for code, entry in self._pending.items()}
            return {"pending": pending, "approved": copy.deepcopy(self._approved)}

    def is_approved(self, profile_id: str, sender_id: str) -> bool:
        with self._lock:
            return sender_id in self._approved.get(profile_id, [])

    def request(self, profile_id: str, sender_id: str, sender: str,
                ttl_s: float = DEFAULT_PAIRING_CODE_TTL_S) -> tuple[str, bool]:
        now = time.time()
        with self._lock:
            for code, entry in list(self._pending.items()):
                if entry["profile"] == profile_id and entry["senderId"] == sender_id:
                    if entry["expires"] > now:
                        return code, False
                    del self._pending[code]
                elif entry["expires"] + EXPIRED_KEPT_S < now:
                    del self._pending[code]
            code = new_code()
            self._pending[code] = {"profile": profile_id, "senderId": sender_id, "sender": sender,
                                   "requested_at": utc_now_iso(), "expires": now + ttl_s}
            return code, True

    def approve(self, code: str) -> dict[str, Any] | None:
        with self._lock:
            entry = self._pending.pop(code.strip().upper(), None)
            if entry is None:
                return None
            found = {**{k: v for k, v in entry.items() if k != "expires"}, "expires_at": _iso(entry["expires"])}
            if entry["expires"] <= time.time():
                raise PairingCodeExpired(found)
            approved = self._approved.setdefault(entry["profile"], [])
            if entry["senderId"] not in approved:
                approved.append(entry["senderId"])
            return found


@dataclass
class LocksState:
    """Resource → (holder, expiry on the monotonic clock), shared by the MemoryLocks handles on it."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    held: dict[str, tuple[str, float]] = field(default_factory=dict)


class MemoryLocks:
    """TTL locks (gateway.stores.Locks): one holder per resource; an expired lock is free to take over.
    (No process can die under an in-memory lock, so unlike files no dead holder is looked up.)"""

    def __init__(self, state: LocksState, *, holder: str, ttl_s: float = 60.0):
        self.state = state
        self.holder = holder
        self.ttl_s = ttl_s
        self.reclaimed = 0

    def acquire(self, resource: str) -> bool:
        now = time.monotonic()
        with self.state.lock:
            current = self.state.held.get(resource)
            if current is not None and current[0] != self.holder and current[1] > now:
                return False
            if current is not None and current[0] != self.holder:
                self.reclaimed += 1
            self.state.held[resource] = (self.holder, now + self.ttl_s)
            return True

    def release(self, resource: str) -> None:
        with self.state.lock:
            current = self.state.held.get(resource)
            if current is not None and current[0] == self.holder:
                del self.state.held[resource]

    def renew(self, resources: list[str]) -> list[str]:
        now = time.monotonic()
        held = []
        with self.state.lock:
            for resource in resources:
                current = self.state.held.get(resource)
                if current is not None and current[0] == self.holder:
                    self.state.held[resource] = (self.holder, now + self.ttl_s)
                    held.append(resource)
        return held

    def clean_expired(self) -> list[str]:
        now = time.monotonic()
        with self.state.lock:
            freed = [resource for resource, (_, expires) in self.state.held.items() if expires <= now]
            for resource in freed:
                del self.state.held[resource]
        return freed


class MemoryJournal:
    """The delivery journal (gateway.stores.DeliveryJournalStore); `twin()` is a second host's handle."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sent: dict[str, dict[int, str]] = {}

    def twin(self) -> MemoryJournal:
        """A second handle on the same journal (another host)."""
        other = MemoryJournal()
        other._lock, other._sent = self._lock, self._sent
        return other

    def sent_parts(self, key: str) -> dict[int, str]:
        with self._lock:
            return dict(self._sent.get(key, {}))

    def record(self, key: str, index: int, platform_id: str) -> None:
        with self._lock:
            self._sent.setdefault(key, {})[index] = platform_id

    def forget(self, key: str) -> None:
        with self._lock:
            self._sent.pop(key, None)


class MemoryEventSink:
    """An event sink (gateway.stores.EventSink) keeping the events it is given as JSON text, redacted."""

    def __init__(self, *, redact: Callable[[str], str] = lambda text: text):
        self._redact = redact
        self._lock = threading.Lock()
        self._stored: list[str] = []
        self.closed = False

    def observe(self, record: dict[str, Any]) -> None:
        text = self._redact(json.dumps(record, default=str, ensure_ascii=False))
        with self._lock:
            if not self.closed:
                self._stored.append(text)

    def close(self, timeout: float = 5.0) -> None:
        with self._lock:
            self.closed = True

    def stored(self) -> list[dict[str, Any]]:
        """The events stored, oldest first."""
        with self._lock:
            return [json.loads(text) for text in self._stored]
