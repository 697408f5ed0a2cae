"""Who may talk to a channel profile: `allow_from`, and optional pairing with one-time codes."""

from __future__ import annotations

import fcntl
import json
import secrets
import string
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.events import utc_now_iso
from gateway.home import Home, atomic_write
from gateway.settings import ChannelProfile, QueueSettings, Settings

CODE_ALPHABET = string.ascii_uppercase + string.digits
PAIRING_REPLY = ("This bot only answers people its operator has approved. Your pairing code is {code}; "
                 "ask the operator to run: switchyard pair approve {code}")


@dataclass(frozen=True)
class AccessDecision:
    """Whether a sender is admitted; `reply` is set when the sender should be told something."""

    allowed: bool
    reply: str | None = None
    reason: str = ""


def new_code() -> str:
    """A fresh pairing code: 8 random letters and digits."""
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(8))


class Pairing(Protocol):
    """Pending codes and approved senders: PairingStore (the home) or gateway/pg/pairing.py (the database)."""

    def read(self) -> dict[str, Any]:
        """{"pending": {code: {profile, senderId, sender, requested_at}}, "approved": {profile: [senderId]}}."""

    def is_approved(self, profile_id: str, sender_id: str) -> bool:
        """True when the sender was approved on this profile."""

    def request(self, profile_id: str, sender_id: str, sender: str) -> tuple[str, bool]:
        """The pending code of this sender (created if none); True when it was just created."""

    def approve(self, code: str) -> dict[str, Any] | None:
        """Admits the sender of a pending code; returns its entry, or None for an unknown code."""


def pairing_store(home: Home, queue: QueueSettings) -> Pairing:
    """The pairing store of this backend: the home's file, or the database on postgres (shared by every host)."""
    if queue.backend == "postgres":
        from gateway.pg.db import dsn_from_settings
        from gateway.pg.pairing import PgPairingStore

        return PgPairingStore.pooled(dsn_from_settings(queue))
    return PairingStore(home)


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
        try:
            data: dict[str, Any] = json.loads(self.path.read_bytes())
        except (OSError, ValueError):
            data = {}
        data.setdefault("pending", {})
        data.setdefault("approved", {})
        return data

    def is_approved(self, profile_id: str, sender_id: str) -> bool:
        return sender_id in self.read()["approved"].get(profile_id, [])

    def request(self, profile_id: str, sender_id: str, sender: str) -> tuple[str, bool]:
        """The pending code of this sender (created if none); True when it was just created."""
        with self._locked() as data:
            for code, entry in data["pending"].items():
                if entry["profile"] == profile_id and entry["senderId"] == sender_id:
                    return code, False
            code = new_code()
            data["pending"][code] = {"profile": profile_id, "senderId": sender_id, "sender": sender,
                                     "requested_at": utc_now_iso()}
            return code, True

    def approve(self, code: str) -> dict[str, Any] | None:
        """Admits the sender of a pending code; returns its entry, or None for an unknown code."""
        with self._locked() as data:
            entry: dict[str, Any] | None = data["pending"].pop(code.strip().upper(), None)
            if entry is not None:
                approved = data["approved"].setdefault(entry["profile"], [])
                if entry["senderId"] not in approved:
                    approved.append(entry["senderId"])
            return entry


class AccessPolicy:
    """Decides whether an inbound message of one profile is admitted.

    With neither `allow_from` nor `pairing: true` everyone is admitted. Otherwise a sender must be
    in `allow_from` or approved through pairing; with pairing an unknown sender gets a code once.
    """

    def __init__(self, home: Home, profile: ChannelProfile, settings: Settings | None = None):
        """Pass the gateway's `settings` (a channel has them as `context.settings`): on the postgres
        backend approvals are then read from the database; without them, from the home."""
        self.profile_id = profile.id
        self.allow_from = {str(s) for s in profile.allow_from} if profile.allow_from is not None else None
        self.pairing = bool(profile.option("pairing", False))
        self.store = pairing_store(home, settings.queue) if settings is not None else PairingStore(home)

    def check(self, sender_id: str, sender: str = "") -> AccessDecision:
        if self.allow_from is None and not self.pairing:
            return AccessDecision(True)
        if self.allow_from is not None and sender_id in self.allow_from:
            return AccessDecision(True)
        if self.pairing:
            if self.store.is_approved(self.profile_id, sender_id):
                return AccessDecision(True)
            code, created = self.store.request(self.profile_id, sender_id, sender)
            reply = PAIRING_REPLY.format(code=code) if created else None
            return AccessDecision(False, reply, "pairing required")
        return AccessDecision(False, None, "sender not in allow_from")
