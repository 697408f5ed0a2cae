"""Pairing's model, shared by every backend's store: pending codes, their expiry, and the store's interface."""

from __future__ import annotations

import secrets
import string
from typing import Any, Protocol

from gateway.settings import DEFAULT_PAIRING_CODE_TTL_S

CODE_ALPHABET = string.ascii_uppercase + string.digits
EXPIRED_KEPT_S = 86_400.0  # an expired code is kept a day, so `pair approve` can say it expired; then pruned


class PairingCodeExpired(Exception):
    """`approve` named a code whose time ran out; it is removed, and the sender's next message gets a new one."""

    def __init__(self, entry: dict[str, Any]):
        super().__init__(f"pairing code expired at {entry['expires_at']}")
        self.entry = entry


def new_code() -> str:
    """A fresh pairing code: 8 random letters and digits."""
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(8))


class Pairing(Protocol):
    """Pending codes and approved senders: PairingStore (the home) or the backend's (`Backend.pairing`)."""

    def read(self) -> dict[str, Any]:
        """{"pending": {code: {profile, senderId, sender, requested_at, expires_at, expires_in_s}},
        "approved": {profile: [senderId]}}; `expires_in_s` is negative once the code expired."""

    def is_approved(self, profile_id: str, sender_id: str) -> bool:
        """True when the sender was approved on this profile."""

    def request(self, profile_id: str, sender_id: str, sender: str,
                ttl_s: float = DEFAULT_PAIRING_CODE_TTL_S) -> tuple[str, bool]:
        """The unexpired pending code of this sender (created, valid `ttl_s`, if none; an expired one is
        replaced); True when it was just created. Prunes codes expired over EXPIRED_KEPT_S ago."""

    def approve(self, code: str) -> dict[str, Any] | None:
        """Admits the sender of a pending code; returns its entry, or None for an unknown code. Raises
        PairingCodeExpired (and removes the code) when it expired."""
