"""Who may talk to a channel profile: `allow_from`, and optional pairing with one-time codes."""

from __future__ import annotations

import fcntl
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gateway.channelkit.pairing import (
    CODE_ALPHABET as CODE_ALPHABET,  # the pairing model's names, still importable here
)
from gateway.channelkit.pairing import EXPIRED_KEPT_S as EXPIRED_KEPT_S
from gateway.channelkit.pairing import Pairing as Pairing
from gateway.channelkit.pairing import PairingCodeExpired as PairingCodeExpired
from gateway.channelkit.pairing import new_code as new_code
from gateway.home import Home, atomic_write
from gateway.settings import DEFAULT_PAIRING_CODE_TTL_S, ChannelProfile, Settings
from gateway.telemetry.events import utc_now_iso

PAIRING_REPLY = ("This bot only answers people its operator has approved. Your pairing code is {code}; "
                 "ask the operator to run: switchyard pair approve {code} (the code expires in {ttl})")


def duration_text(seconds: float) -> str:
    """A TTL for a person: `1 hour`, `90 minutes`, `45 seconds` (to the minute past two minutes)."""
    whole = round(seconds) if seconds < 120 else round(seconds / 60) * 60
    for unit, size in (("day", 86_400), ("hour", 3_600), ("minute", 60)):
        if whole >= size and (whole % size == 0 or whole >= 2 * size):
            count = round(whole / size)
            return f"{count} {unit}{'s' if count != 1 else ''}"
    count = max(1, whole)
    return f"{count} second{'s' if count != 1 else ''}"


@dataclass(frozen=True)
class AccessDecision:
    """Whether a sender is admitted; `reply` is set when the sender should be told something."""

    allowed: bool
    reply: str | None = None
    reason: str = ""


class PairingStore:
    """Pending codes and approved senders, in `<home>/queue/state/pairing.json` (locked for writers)."""

    def __init__(self, home: Home):
        self.path = home.state / "pairing.json"
        self._lock_path = home.state / "pairing.lock"

    @contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock_path.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            data = self.read()
            yield data
            atomic_write(self.path, json.dumps(data, indent=2).encode(), fsync=True)

    def read(self) -> dict[str, Any]:
        return self._read(with_expiry=True)

    def _read(self, *, with_expiry: bool = False) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(self.path.read_bytes())
        except (OSError, ValueError):
            data = {}
        data.setdefault("pending", {})
        data.setdefault("approved", {})
        if with_expiry:
            now = time.time()
            for entry in data["pending"].values():
                entry["expires_at"] = _iso(_expires(entry))
                entry["expires_in_s"] = _expires(entry) - now
        return data

    def is_approved(self, profile_id: str, sender_id: str) -> bool:
        return sender_id in self._read()["approved"].get(profile_id, [])

    def request(self, profile_id: str, sender_id: str, sender: str,
                ttl_s: float = DEFAULT_PAIRING_CODE_TTL_S) -> tuple[str, bool]:
        now = time.time()
        with self._locked() as data:
            pending = data["pending"]
            for code, entry in list(pending.items()):
                if entry["profile"] == profile_id and entry["senderId"] == sender_id:
                    if _expires(entry) > now:
                        return code, False
                    del pending[code]  # expired: replaced by a new code below
                elif _expires(entry) + EXPIRED_KEPT_S < now:
                    del pending[code]
            code = new_code()
            pending[code] = {"profile": profile_id, "senderId": sender_id, "sender": sender,
                             "requested_at": utc_now_iso(), "expires_at": _iso(now + ttl_s)}
            return code, True

    def approve(self, code: str) -> dict[str, Any] | None:
        with self._locked() as data:
            entry: dict[str, Any] | None = data["pending"].pop(code.strip().upper(), None)
            if entry is None:
                return None
            expired = _expires(entry) <= time.time()
            if not expired:
                approved = data["approved"].setdefault(entry["profile"], [])
                if entry["senderId"] not in approved:
                    approved.append(entry["senderId"])
        if expired:  # raised once the file is written without it: an expired code is removed
            raise PairingCodeExpired({**entry, "expires_at": _iso(_expires(entry))})
        return entry


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _expires(entry: dict[str, Any]) -> float:
    """When a pending code expires (epoch seconds); a code written before codes expired gets the default TTL."""
    if "expires_at" in entry:
        return datetime.fromisoformat(entry["expires_at"]).timestamp()
    return datetime.fromisoformat(entry["requested_at"]).timestamp() + DEFAULT_PAIRING_CODE_TTL_S


class AccessPolicy:
    """Decides whether an inbound message of one profile is admitted.

    With neither `allow_from` nor `pairing: true` everyone is admitted. Otherwise a sender must be
    in `allow_from` or approved through pairing; with pairing an unknown sender gets a code once.
    """

    def __init__(self, home: Home, profile: ChannelProfile, settings: Settings | None = None, *,
                 store: Pairing | None = None):
        """`store`: the backend's approvals (a channel's `context.access` has the one its gateway opened); a
        profile with `pairing: true` needs it — never assumed to be the home's file, which on a shared
        database would admit no one another host approved."""
        self.profile_id = profile.id
        self.allow_from = _senders(profile)
        self.pairing = bool(profile.option("pairing", False))
        self.code_ttl_s = float(profile.option("pairing_code_ttl_sec", DEFAULT_PAIRING_CODE_TTL_S))
        if self.pairing and store is None:
            raise ValueError(f"channel profile {profile.id!r} has pairing: true but no pairing store was given: "
                             "use the channel's context.access (its backend's store)")
        self._store = store

    def reconfigure(self, profile: ChannelProfile) -> None:
        """Admits the `allow_from` of the profile as settings.yaml was reloaded while the channel runs."""
        self.allow_from = _senders(profile)

    @property
    def store(self) -> Pairing:
        """The pairing store (only a profile with `pairing: true` has one)."""
        assert self._store is not None, "a profile without pairing has no pairing store"
        return self._store

    def check(self, sender_id: str, sender: str = "") -> AccessDecision:
        if self.allow_from is None and not self.pairing:
            return AccessDecision(True)
        if self.allow_from is not None and sender_id in self.allow_from:
            return AccessDecision(True)
        if self.pairing:
            if self.store.is_approved(self.profile_id, sender_id):
                return AccessDecision(True)
            code, created = self.store.request(self.profile_id, sender_id, sender, self.code_ttl_s)
            reply = PAIRING_REPLY.format(code=code, ttl=duration_text(self.code_ttl_s)) if created else None
            return AccessDecision(False, reply, "pairing required")
        return AccessDecision(False, None, "sender not in allow_from")


def _senders(profile: ChannelProfile) -> set[str] | None:
    """The sender ids `allow_from` admits (None: the key is absent, everyone)."""
    return {str(sender) for sender in profile.allow_from} if profile.allow_from is not None else None
