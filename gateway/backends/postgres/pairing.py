"""Pairing on the database: codes and approvals in `switchyard_pairing_pending` / `_approved`.

A sender approved with `switchyard pair approve` on any host is admitted by whichever host owns the
channel profile. The interface of gateway/channelkit/pairing.py, as gateway/channelkit/access.py's PairingStore (the
home's file).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

import psycopg

from gateway.backends.postgres.db import SharedPool
from gateway.channelkit.pairing import EXPIRED_KEPT_S, PairingCodeExpired, new_code
from gateway.settings import DEFAULT_PAIRING_CODE_TTL_S

Connect = Callable[[], AbstractContextManager[psycopg.Connection[Any]]]
"""Gives a connection that commits when its `with` block ends."""

CLI_CONNECT_TIMEOUT_S = 5


def _iso(stamp: datetime) -> str:
    return stamp.isoformat(timespec="seconds").replace("+00:00", "Z")


class PgPairingStore:
    """Pending codes and approved senders in the database."""

    def __init__(self, connect: Connect):
        self._connect = connect

    @classmethod
    def pooled(cls, dsn: str, pool: SharedPool | None = None) -> PgPairingStore:
        """For a gateway process: connections from its backend's pool (`pool`; one of its own when None)."""
        shared = pool or SharedPool(dsn)
        return cls(lambda: shared.connection())

    @classmethod
    def direct(cls, dsn: str) -> PgPairingStore:
        """For a command: one connection per operation, failing within seconds when the server is down."""
        return cls(lambda: psycopg.connect(dsn, connect_timeout=CLI_CONNECT_TIMEOUT_S))

    def read(self) -> dict[str, Any]:
        with self._connect() as conn:
            pending = {code: {"profile": profile, "senderId": sender_id, "sender": sender,
                              "requested_at": _iso(requested), "expires_at": _iso(expires), "expires_in_s": left}
                       for code, profile, sender_id, sender, requested, expires, left in conn.execute(
                           "SELECT code, profile, sender_id, sender, requested_at, expires_at, "
                           "extract(epoch FROM expires_at - now())::float8 FROM switchyard_pairing_pending "
                           "ORDER BY requested_at, code")}
            approved: dict[str, list[str]] = {}
            for profile, sender_id in conn.execute(
                    "SELECT profile, sender_id FROM switchyard_pairing_approved ORDER BY profile, approved_at"):
                approved.setdefault(profile, []).append(sender_id)
        return {"pending": pending, "approved": approved}

    def is_approved(self, profile_id: str, sender_id: str) -> bool:
        with self._connect() as conn:
            return conn.execute("SELECT 1 FROM switchyard_pairing_approved WHERE profile = %s AND sender_id = %s",
                                (profile_id, sender_id)).fetchone() is not None

    def request(self, profile_id: str, sender_id: str, sender: str,
                ttl_s: float = DEFAULT_PAIRING_CODE_TTL_S) -> tuple[str, bool]:
        """The unexpired pending code of this sender (created, valid `ttl_s`, if none; an expired one is
        replaced); True when it was just created. Two hosts asking at once get the same code: one sender
        has one pending code per profile. Prunes codes expired over EXPIRED_KEPT_S ago."""
        with self._connect() as conn:
            conn.execute("DELETE FROM switchyard_pairing_pending WHERE expires_at < now() - make_interval(secs => %s) "
                         "OR (profile = %s AND sender_id = %s AND expires_at <= now())",
                         (EXPIRED_KEPT_S, profile_id, sender_id))
            created = conn.execute(
                "INSERT INTO switchyard_pairing_pending (code, profile, sender_id, sender, expires_at) "
                "VALUES (%s, %s, %s, %s, now() + make_interval(secs => %s)) "
                "ON CONFLICT (profile, sender_id) DO NOTHING RETURNING code",
                (new_code(), profile_id, sender_id, sender, ttl_s)).fetchone()
            if created is not None:
                return str(created[0]), True
            row = conn.execute("SELECT code FROM switchyard_pairing_pending WHERE profile = %s AND sender_id = %s",
                               (profile_id, sender_id)).fetchone()
        if row is None:  # approved between the two statements
            return self.request(profile_id, sender_id, sender, ttl_s)
        return str(row[0]), False

    def approve(self, code: str) -> dict[str, Any] | None:
        """Admits the sender of a pending code; returns its entry, or None for an unknown code. Raises
        PairingCodeExpired (and removes the code) when it expired."""
        with self._connect() as conn, conn.transaction():
            row = conn.execute("DELETE FROM switchyard_pairing_pending WHERE code = %s "
                               "RETURNING profile, sender_id, sender, requested_at, expires_at, expires_at <= now()",
                               (code.strip().upper(),)).fetchone()
            if row is None:
                return None
            profile, sender_id, sender, requested, expires, expired = row
            entry = {"profile": profile, "senderId": sender_id, "sender": sender, "requested_at": _iso(requested),
                     "expires_at": _iso(expires)}
            if not expired:
                conn.execute("INSERT INTO switchyard_pairing_approved (profile, sender_id) VALUES (%s, %s) "
                             "ON CONFLICT DO NOTHING", (profile, sender_id))
        if expired:  # the DELETE is committed: an expired code is removed
            raise PairingCodeExpired(entry)
        return entry
