"""Leases in `switchyard_leases`: what this process owns (a channel profile), judged by the database's clock.

A lease is taken when it is free, expired, or already ours, and written to expire `lease_sec` after
the database's `now()`; it is renewed every `lease_sec / 3`. Locally a lease counts as held only
until `lease_sec` after the moment its last successful renewal was *sent*, minus a margin of
`lease_sec / 3` to stop what it guards: a process that cannot renew (the database unreachable,
the process paused) gives the lease up before any other process can take it, so two processes
never run one channel profile at once. Losing a lease (taken over, or not renewed in time) calls
`on_lost`; a clean stop releases what is held so another process may take it at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from contextlib import suppress
from typing import Any

from gateway.disk.locks import process_instance

log = logging.getLogger("switchyard.pg.leases")

TAKE = """
INSERT INTO switchyard_leases AS l (name, holder, expires_at)
VALUES (%(name)s, %(holder)s, now() + make_interval(secs => %(sec)s))
ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at,
    acquired_at = CASE WHEN l.holder = EXCLUDED.holder THEN l.acquired_at ELSE now() END
WHERE l.expires_at < now() OR l.holder = EXCLUDED.holder
RETURNING holder
"""
OWNER = ("SELECT holder, GREATEST(0, extract(epoch FROM expires_at - now()))::float8 "
         "FROM switchyard_leases WHERE name = %s")
RENEW = ("UPDATE switchyard_leases SET expires_at = now() + make_interval(secs => %s) "
         "WHERE holder = %s AND name = ANY(%s) AND expires_at > now() RETURNING name")
RELEASE = "DELETE FROM switchyard_leases WHERE holder = %s AND name = ANY(%s)"
HELD_BY = "EXISTS (SELECT 1 FROM switchyard_leases WHERE name = %s AND holder = %s AND expires_at > now())"
"""A WHERE fragment (params: lease name, holder) fencing a write to the lease's current holder."""

OnLost = Callable[[str, str], Coroutine[Any, Any, None]]


def channel_lease(channel_type: str, profile_id: str) -> str:
    """The lease that owns a channel profile (one bot token)."""
    return f"channel:{channel_type}/{profile_id}"


class Leases:
    """This process's leases on one database: take, renew (a background loop), release, and loss."""

    def __init__(self, dsn: str, lease_sec: float, on_lost: OnLost, *, holder: str | None = None,
                 on_trouble: Callable[[], None] = lambda: None):
        """`on_trouble` is called when `last_error` changes."""
        self.dsn = dsn
        self.lease_sec = lease_sec
        self.holder = holder or process_instance()
        self.on_lost = on_lost
        self.margin = lease_sec / 3  # time left to stop what a lease guards before it can be taken
        self.timeout = max(0.2, min(lease_sec / 4, 5.0))  # one query; a hung database must not stall renewal
        self.held: dict[str, float] = {}  # name -> local deadline (time.monotonic) of the database's expiry
        self.last_error: str | None = None  # why the last renewal failed (None: it worked)
        self.on_trouble = on_trouble
        self._conn: Any = None
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    def holds(self, name: str) -> bool:
        """Whether the lease is held and far enough from its expiry to go on using what it guards."""
        deadline = self.held.get(name)
        return deadline is not None and time.monotonic() < deadline - self.margin

    async def take(self, name: str) -> tuple[str | None, float]:
        """Takes the lease if it is free, expired or ours: (holder now, seconds until it expires);
        the holder is `self.holder` when taken, None when the lease vanished meanwhile."""
        sent = time.monotonic()
        rows = await self._query(TAKE, {"name": name, "holder": self.holder, "sec": self.lease_sec})
        if rows:
            self.held[name] = sent + self.lease_sec
            return self.holder, self.lease_sec
        found = await self._query(OWNER, (name,))
        if not found:
            return None, 0.0
        return str(found[0][0]), float(found[0][1])

    async def owner(self, name: str) -> tuple[str | None, float]:
        """(holder, seconds until expiry) as the database has it; (None, 0) when nobody holds it."""
        found = await self._query(OWNER, (name,))
        return (str(found[0][0]), float(found[0][1])) if found else (None, 0.0)

    async def release(self, names: list[str]) -> None:
        """Gives leases up at once (a clean stop), so another process need not wait for their expiry."""
        for name in names:
            self.held.pop(name, None)
        if names:
            await self._query(RELEASE, (self.holder, names), fetch=False)

    async def run(self) -> None:
        """Renews every held lease each `lease_sec / 3`; declares lost those not renewed in time."""
        interval = self.lease_sec / 3
        tick = max(0.05, min(self.lease_sec / 12, 1.0))
        next_renew = time.monotonic() + interval
        while True:
            now = time.monotonic()
            for name, deadline in list(self.held.items()):
                if now >= deadline - self.margin:
                    self._lose(name, f"not renewed within {self.lease_sec - self.margin:g}s"
                                     f"{f' ({self.last_error})' if self.last_error else ''}")
            if self.held and now >= next_renew:
                next_renew = await self._renew(interval, tick)
            elif not self.held:
                next_renew = now + interval
            await asyncio.sleep(tick)

    async def _renew(self, interval: float, retry: float) -> float:
        names = list(self.held)
        sent = time.monotonic()
        try:
            rows = await self._query(RENEW, (self.lease_sec, self.holder, names))
        except Exception as exc:
            if self.last_error is None:
                log.warning("cannot renew leases %s: %s", ", ".join(names), _brief(exc))
                self.last_error = _brief(exc)
                self.on_trouble()
            self.last_error = _brief(exc)
            return time.monotonic() + retry
        if self.last_error is not None:
            log.info("leases renewed again")
            self.last_error = None
            self.on_trouble()
        kept = {row[0] for row in rows}
        for name in names:
            if name not in self.held:
                continue  # released or lost meanwhile
            if name in kept:
                self.held[name] = sent + self.lease_sec
            else:
                self._lose(name, "it expired or another process took it")
        return sent + interval

    def _lose(self, name: str, reason: str) -> None:
        if self.held.pop(name, None) is None:
            return
        task = asyncio.create_task(self.on_lost(name, reason), name=f"lease-lost:{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _query(self, sql: str, params: Any, *, fetch: bool = True) -> list[Any]:
        """One statement on this object's own connection (opened again after any failure)."""
        import psycopg

        async with self._lock:
            try:
                async with asyncio.timeout(self.timeout):  # not wait_for: it can swallow a cancellation
                    if self._conn is None:
                        self._conn = await psycopg.AsyncConnection.connect(
                            self.dsn, autocommit=True, connect_timeout=max(1, round(self.timeout)))
                    cursor = await self._conn.execute(sql, params)
                    return list(await cursor.fetchall()) if fetch else []
            except BaseException:
                await self._drop()
                raise

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with suppress(Exception):
                async with asyncio.timeout(1.0):
                    await conn.close()

    async def close(self) -> None:
        """Closes the connection; waits for loss handlers still running."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        async with self._lock:
            await self._drop()


def _brief(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
