"""The PostgreSQL queue: `switchyard_messages` as a QueueStore, so the generic Worker
(gateway/runtime/worker.py) runs on PostgreSQL as it does on a file home or in memory.

Claimed by SQL, not through Procrastinate. A Procrastinate job has one lock, so a message of two keys
was two jobs (a gate parked on its conversation, a process job on its run) and a worker of our own
around them; here the Worker's KeyScheduler holds every key of a message and the postgres Locks store
(gateway/backends/postgres/locks.py) makes those keys cross-host, exactly as on a shared file home, and a
claim is one `UPDATE ... WHERE holder IS NULL` that two hosts cannot both win. That keeps every
guarantee with one worker loop and no job table beside the message rows:

- FIFO per key, across hosts and whatever the locks' expiry: a pass reads the open rows in taking-in
  order, and a row this handle cannot take now (held by another process, or backing off) blocks its
  keys for the rest of the pass, so no younger row of one of them is claimed before it;
- a claimed row stays `queued` (with its holder) until the Worker starts it (`start`: `running`), so an
  edit folds into it on any host (gateway/backends/postgres/edits.py) until then, never after;
- the answer (its replies, the answered identity, the row done) is one statement or one transaction
  (`answer`, gateway/backends/postgres/outbox.py), so a crash or a database restart never answers twice;
- what a handle that stopped (its `switchyard_processes` row gone, silent for `lease_sec`, or its process
  gone from this host) had claimed is put back in its place by `recover_dead_workers` on any other.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from gateway.backends.postgres.db import SharedPool
from gateway.backends.postgres.errors import database_away
from gateway.backends.postgres.intake import INSERT
from gateway.disk.locks import holder_process, pid_alive
from gateway.home import Home
from gateway.payloads import parse_payload
from gateway.settings import Settings
from gateway.spool.queue import Claimed
from gateway.storable import made_safe

KEPT_ERRORS = 20
POLL_S = 0.25  # rows taken in by other hosts, and rows another host put back, are seen this often
SCAN_LIMIT = 2000  # open rows read by one pass

OPEN_ROWS = ("SELECT id, name, payload, holder, due_at <= now() FROM switchyard_messages "
             "WHERE state IN ('queued', 'running') ORDER BY id LIMIT %s")
TAKE = ("UPDATE switchyard_messages SET holder = %s WHERE id = %s AND state = 'queued' AND holder IS NULL "
        "AND due_at <= now() RETURNING name, payload, attempts, errors")
RETAKE = ("UPDATE switchyard_messages SET state = 'queued' WHERE id = %s AND holder = %s "
          "AND state IN ('queued', 'running') RETURNING name, payload, attempts, errors")
TAKE_OLDEST = ("UPDATE switchyard_messages SET holder = %(me)s WHERE id = (SELECT id FROM switchyard_messages "
               "WHERE state = 'queued' AND holder IS NULL AND due_at <= now() ORDER BY id LIMIT 1 "
               "FOR UPDATE SKIP LOCKED) RETURNING id, name, payload, attempts, errors")
START = ("UPDATE switchyard_messages SET state = 'running', updated_at = now() "
         "WHERE id = %s AND holder = %s AND state = 'queued' RETURNING payload")
PUT_BACK = ("UPDATE switchyard_messages SET state = 'queued', holder = NULL, attempts = %s, errors = %s::jsonb, "
            "due_at = now() + make_interval(secs => %s), updated_at = now() "
            "WHERE id = %s AND holder = %s AND state IN ('queued', 'running')")
DEAD = ("UPDATE switchyard_messages SET state = 'dead', holder = NULL, reason = %s, attempts = %s, "
        "errors = %s::jsonb, conversation = COALESCE(NULLIF(conversation, ''), %s, ''), updated_at = now() "
        "WHERE id = %s AND state NOT IN ('done', 'dead')")
NEXT_DUE = ("SELECT extract(epoch FROM min(due_at) - now()) FROM switchyard_messages "
            "WHERE state = 'queued' AND holder IS NULL AND due_at > now()")
REGISTER = ("INSERT INTO switchyard_processes (holder, role, host, pid, detail) VALUES (%s, %s, %s, %s, %s::jsonb) "
            "ON CONFLICT (holder) DO UPDATE SET last_seen = now(), detail = EXCLUDED.detail")
HOLDERS = ("SELECT DISTINCT m.holder, p.holder IS NOT NULL AND p.last_seen > now() - make_interval(secs => %s) "
           "FROM switchyard_messages m LEFT JOIN switchyard_processes p ON p.holder = split_part(m.holder, '#', 1) "
           "WHERE m.holder IS NOT NULL AND m.state IN ('queued', 'running')")
RECOVER = ("UPDATE switchyard_messages m SET state = 'queued', holder = NULL, updated_at = now() "
           "FROM (SELECT id, holder FROM switchyard_messages WHERE holder = ANY(%s) AND state IN ('queued', 'running') "
           "FOR UPDATE) o WHERE m.id = o.id RETURNING m.name, o.holder")


class DatabaseAway(OSError):
    """The database cannot be reached now: the Worker waits it out as it waits out a full disk."""


@dataclass
class _Pass:
    rows: list[tuple[Any, ...]]
    at: int = 0
    blocked: set[str] | None = None


class PgQueue:
    """One handle on `switchyard_messages`, named `holder` in it; its process is `switchyard_processes`'s row of the
    holder's part before any `#` (a process may hold several handles: gateways in one test process)."""

    def __init__(self, pool: SharedPool, *, holder: str, lease_s: float, role: str = "worker",
                 files: tuple[Home, Settings] | None = None):
        self.pool = pool
        self.files = files  # where a started message's stored attachments are written back (postgres/files.py)
        self.holder = holder
        self.process = holder.partition("#")[0]
        self.lease_s = lease_s
        self.role = role
        self._pass: _Pass | None = None
        self._handed: set[int] = set()  # rows handed to the Worker as claimed, not yet given back
        self._requeued: dict[int, tuple[int, str]] = {}  # rows put back for a retry, whose place the Worker holds
        self._vanished: list[tuple[int, str]] = []

    def _run(self, sql: str, params: Any) -> list[tuple[Any, ...]]:
        try:
            with self.pool.lone() as conn:
                cursor = conn.execute(sql, params)
                return cursor.fetchall() if cursor.description is not None else []
        except psycopg.Error as exc:
            if database_away(exc):
                raise DatabaseAway(f"the database is unreachable: {type(exc).__name__}: {exc}") from exc
            raise

    # --- life cycle -------------------------------------------------------------------------

    def open(self) -> list[str]:
        """Registers this handle and puts back what it (a previous life) and stopped handles had claimed."""
        self.heartbeat({"database": "connected"})
        return self._recover(include_own=True)

    def heartbeat(self, detail: dict[str, Any]) -> None:
        """Keeps this handle alive in `switchyard_processes` (a silent one is dead after `lease_s`)."""
        from gateway.storable import safe_json

        host, pid = holder_process(self.process)
        self._run(REGISTER, (self.process, self.role, host or socket.gethostname(), pid or 0,
                             safe_json(detail).decode()))

    def close(self) -> None:
        """Removes this handle: what it still has claimed is put back by the next handle that looks."""
        self._run("DELETE FROM switchyard_processes WHERE holder = %s", (self.process,))

    def recover_dead_workers(self) -> list[str]:
        return self._recover(include_own=False)

    def _recover(self, *, include_own: bool) -> list[str]:
        dead = [holder for holder, alive in self._run(HOLDERS, (self.lease_s,))
                if (holder == self.holder and include_own)
                or (holder != self.holder and (not alive or _gone_from_this_host(holder)))]
        if not dead:
            return []
        return [f"returned {name} of {holder} to the queue" for name, holder in self._run(RECOVER, (dead,))]

    # --- taking in --------------------------------------------------------------------------

    def enqueue(self, data: bytes, *, hint: str = "msg") -> Path:
        """Stores a payload as a keyless row (gateway/backends/postgres/intake.py stores a channel's, with its
        columns); its name is unique and sorts after every earlier one."""
        name = f"{time.time_ns():020d}-{hint}.json"
        self._run(INSERT, (name, data, "", "", "", [], None))
        return Path("postgres:queued") / name

    def rescan(self) -> None:
        """Nothing to index: every pass reads the table."""

    def notice(self, name: str) -> None:
        """Nothing to index: every pass reads the table."""

    # --- claiming ---------------------------------------------------------------------------

    def claim(self) -> Claimed | None:
        rows = self._run(TAKE_OLDEST, {"me": self.holder})
        if not rows:
            return None
        row_id, name, payload, attempts, errors = rows[0]
        return self._claimed(row_id, name, payload, attempts, errors)

    def claim_admitted(self, keys_of: Callable[[bytes], tuple[str, ...]],
                       admit: Callable[[tuple[str, ...]], bool]) -> Claimed | None:
        """The oldest row this handle may take whose keys `admit` accepts; a row it cannot take now (another's,
        backing off, refused) blocks its keys until `end_pass`, so nothing younger of them overtakes it."""
        if self._pass is None:
            self._pass = _Pass(self._run(OPEN_ROWS, (SCAN_LIMIT,)), blocked=set())
        current = self._pass
        blocked = current.blocked if current.blocked is not None else set()
        while current.at < len(current.rows):
            row_id, name, payload, holder, due = current.rows[current.at]
            current.at += 1
            if row_id in self._handed:
                continue  # its Worker has it and orders it
            keys = keys_of(bytes(payload))
            lost = holder == self.holder  # claimed here, but its claim's answer was lost (a connection ended)
            if (holder is not None and not lost) or not (due or lost) or not blocked.isdisjoint(keys) or (
                    keys and not admit(keys)):
                blocked.update(keys)
                continue
            taken = self._run(RETAKE, (row_id, self.holder)) if lost else self._run(TAKE, (self.holder, row_id))
            if not taken:  # another handle took it since the pass read it
                blocked.update(keys)
                continue
            return self._claimed(row_id, *taken[0])
        return None

    def end_pass(self) -> None:
        if self._pass is not None and self._requeued:
            self._note_vanished(self._pass.rows)
        self._pass = None

    def _note_vanished(self, rows: list[tuple[Any, ...]]) -> None:
        """Rows put back here for a retry that the pass read as no longer waiting for this handle (another host
        took, answered or dead-lettered them while this one's key lock had lapsed): their held places are let go
        (`take_vanished`), or the Worker would keep their keys' later messages waiting for them for good."""
        open_here = {int(row[0]) for row in rows if row[3] is None or row[3] == self.holder}
        read_all, last = len(rows) < SCAN_LIMIT, (int(rows[-1][0]) if rows else 0)
        for row_id in [r for r in self._requeued if r not in open_here and (read_all or r <= last)]:
            self._vanished.append(self._requeued.pop(row_id))

    def _claimed(self, row_id: int, name: str, payload: Any, attempts: int, errors: Any) -> Claimed:
        self._handed.add(int(row_id))
        self._requeued.pop(int(row_id), None)
        return Claimed(name, Path("postgres:claimed") / name, bytes(payload), (int(row_id), name), int(attempts),
                       [str(error) for error in errors])

    def next_due_in(self) -> float | None:
        """Seconds until the earliest backing-off row is due (rows of other hosts: the runtime wakes its Worker
        every POLL_S)."""
        [(wait,)] = self._run(NEXT_DUE, ())
        return None if wait is None else max(0.0, float(wait))

    def take_claim_errors(self) -> list[str]:
        return []  # a claim that fails raises (the database away), and the Worker's pass says so

    def take_vanished(self) -> list[tuple[int, str]]:
        """Orders of rows put back here for a retry that another handle has taken since (`_note_vanished`)."""
        vanished, self._vanished = self._vanished, []
        return vanished

    # --- after the claim --------------------------------------------------------------------

    def start(self, claimed: Claimed) -> bytes | None:
        """Marks the row running; its payload as it is now (an edit folded in since the claim), or None when
        it is no longer this handle's (put back as a dead handle's: someone else runs it)."""
        rows = self._run(START, (claimed.order[0], self.holder))
        if not rows:
            self.settled(claimed)
            return None
        data = bytes(rows[0][0])
        return data if self.files is None else self._materialized(claimed.name, data)

    def _materialized(self, name: str, data: bytes) -> bytes:
        """The payload naming its attachments as written back under this host's home; ValueError (why) when
        one cannot be (gateway.backends.postgres.files.FileConflict)."""
        from gateway.backends.postgres.files import FileConflict, materialize

        assert self.files is not None
        home, settings = self.files
        try:
            message = parse_payload(data, settings.queue.max_payload_bytes)
        except ValueError:
            return data  # the Worker dead-letters it with its reason
        if not message.file_paths():
            return data
        try:
            with self.pool.connection() as conn:
                moved = materialize(conn, name, message, home, settings=settings)
        except FileConflict as exc:
            raise ValueError(f"attachment: {exc}") from exc
        return data if moved is message else moved.to_json()

    def settled(self, claimed: Claimed) -> None:
        """Its Worker is done with it (answered, or no longer this handle's): a pass reads its row as anyone's."""
        self._handed.discard(claimed.order[0])

    def rewrite_claimed(self, claimed: Claimed, data: bytes) -> None:
        self._run("UPDATE switchyard_messages SET payload = %s WHERE id = %s AND holder = %s",
                  (data, claimed.order[0], self.holder))

    # A row leaves `_handed` only once it was given back: while the Worker tries again to write a message's
    # end (the database away), a pass must not take the row it still holds for a claim whose answer was lost.

    def requeue(self, claimed: Claimed, error: str, delay_s: float) -> int:
        attempts = claimed.attempts + 1
        errors = made_safe([*claimed.errors, error])[-KEPT_ERRORS:]  # an error may quote what no store holds
        self._run(PUT_BACK, (attempts, json.dumps(errors), delay_s, claimed.order[0], self.holder))
        self._handed.discard(claimed.order[0])
        self._requeued[claimed.order[0]] = (claimed.order[0], claimed.name)
        return attempts

    def release(self, claimed: Claimed, delay_s: float) -> None:
        self._run(PUT_BACK, (claimed.attempts, json.dumps(made_safe(claimed.errors)[-KEPT_ERRORS:]), delay_s,
                             claimed.order[0], self.holder))
        self._handed.discard(claimed.order[0])

    def complete(self, claimed: Claimed) -> None:
        self._run("UPDATE switchyard_messages SET state = 'done', holder = NULL, updated_at = now() "
                  "WHERE id = %s AND state NOT IN ('done', 'dead')", (claimed.order[0],))
        self._handed.discard(claimed.order[0])

    def dead_letter(self, claimed: Claimed, reason: str, *, attempts: int | None = None,
                    conversation: str | None = None) -> Path:
        """The row dead with `reason`, its original bytes kept in it (`switchyard dead` shows them)."""
        errors = made_safe(claimed.errors)[-KEPT_ERRORS:]
        self._run(DEAD, (made_safe(reason), claimed.attempts if attempts is None else attempts, json.dumps(errors),
                         conversation, claimed.order[0]))
        self._handed.discard(claimed.order[0])
        return Path("postgres:dead") / claimed.name


def _gone_from_this_host(holder: str) -> bool:
    """Whether `holder` (`<host>:<pid>[:...]`) names a process of this host that no longer exists."""
    host, pid = holder_process(holder)
    return host == socket.gethostname() and pid is not None and not pid_alive(pid)
