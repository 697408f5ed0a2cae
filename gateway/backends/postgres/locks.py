"""Coordination locks in `switchyard_locks`: LockDirectory's interface for processes on many hosts.

One holder per resource; a lock expires `ttl_s` after its last acquire or renewal by the database's
clock (hosts' clocks never matter), and a holder that stops renewing loses it then. A holder on
this host (`<host>:<pid>:...`) whose process is gone is taken over at once, as a lock file's is (a
restarted `switchyard run` resumes its runs without waiting out the TTL); one on another host cannot
be looked up, so its lock is taken over after the TTL.
"""

from __future__ import annotations

import socket
from typing import Any

from gateway.backends.postgres.db import SharedPool
from gateway.disk.locks import holder_process, pid_alive

# Whether it was taken, and who held it before (and whether that hold had not expired): a lock held by
# another is answered in the same round trip, with who holds it (a process of this host may be gone).
ACQUIRE = """
WITH before AS (SELECT holder, expires_at > now() AS live FROM switchyard_locks WHERE resource = %(resource)s),
taken AS (
    INSERT INTO switchyard_locks AS l (resource, holder, expires_at)
    VALUES (%(resource)s, %(holder)s, now() + make_interval(secs => %(ttl)s))
    ON CONFLICT (resource) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at,
        acquired_at = CASE WHEN l.holder = EXCLUDED.holder THEN l.acquired_at ELSE now() END
    WHERE l.expires_at <= now() OR l.holder = EXCLUDED.holder OR l.holder = %(gone)s
    RETURNING 1)
SELECT EXISTS (SELECT 1 FROM taken), (SELECT holder FROM before), COALESCE((SELECT live FROM before), false)
"""
RELEASE = "DELETE FROM switchyard_locks WHERE resource = %s AND holder = %s"
RENEW = ("UPDATE switchyard_locks SET expires_at = now() + make_interval(secs => %s) "
         "WHERE holder = %s AND resource = ANY(%s) RETURNING resource")
CLEAN = "DELETE FROM switchyard_locks WHERE expires_at <= now() RETURNING resource"
OWNER = "SELECT holder FROM switchyard_locks WHERE resource = %s AND expires_at > now()"


class PgLocks:
    """Takes, renews, releases and reclaims locks as rows; each operation is one statement."""

    def __init__(self, dsn: str, *, holder: str, ttl_s: float = 60.0, pool: SharedPool | None = None):
        self.dsn = dsn
        self.pool = pool or SharedPool(dsn)  # its backend's; its own when built alone (tests)
        self.holder = holder
        self.ttl_s = ttl_s
        self.reclaimed = 0  # expired locks of other holders taken over (their holder may have died mid-work)

    def _execute(self, sql: str, params: Any) -> list[tuple[Any, ...]]:
        with self.pool.lone() as conn:
            cursor = conn.execute(sql, params)
            return cursor.fetchall() if cursor.description is not None else []

    def acquire(self, resource: str) -> bool:
        """Takes the lock on `resource` if it is free, expired, already ours (then renewed) or held by a
        process of this host that is gone."""
        params = {"resource": resource, "holder": self.holder, "ttl": self.ttl_s, "gone": None}
        [(taken, before, live)] = self._execute(ACQUIRE, params)
        if not taken:
            if not live or not _gone_from_this_host(before):
                return False
            [(taken, before, _)] = self._execute(ACQUIRE, {**params, "gone": before})  # if it still has it
            if not taken:
                return False
        if before is not None and before != self.holder:
            self.reclaimed += 1
        return True

    def release(self, resource: str) -> None:
        """Drops the lock if this holder has it."""
        self._execute(RELEASE, (resource, self.holder))

    def renew(self, resources: list[str]) -> list[str]:
        """Moves the expiry of held locks forward (for work that outlives the TTL); returns those still held."""
        if not resources:
            return []
        return [str(row[0]) for row in self._execute(RENEW, (self.ttl_s, self.holder, list(resources)))]

    def owner(self, resource: str) -> str | None:
        """Who holds the lock on `resource` now (None: nobody, or it expired)."""
        rows = self._execute(OWNER, (resource,))
        return str(rows[0][0]) if rows else None

    def clean_expired(self) -> list[str]:
        """Removes every expired lock (retention); returns the resources freed."""
        return [str(row[0]) for row in self._execute(CLEAN, ())]


def _gone_from_this_host(holder: str) -> bool:
    """Whether `holder` (`<host>:<pid>[:...]`) names a process of this host that no longer exists."""
    host, pid = holder_process(holder)
    return host == socket.gethostname() and pid is not None and not pid_alive(pid)
