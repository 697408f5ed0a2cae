"""Dead letters on the PostgreSQL backend: dead messages (`switchyard_messages`, state 'dead', with
their original bytes) and dead replies (`switchyard_outbox`, state 'dead'), listed, shown, put back
(retry) or deleted (drop), with the same names and answers as the file store in gateway/spool/deadletters.py.

A retried message is queued again with a fresh attempt count and its jobs deferred again, in one
transaction, so it is never queued without jobs nor run twice; a retried reply is pending again,
due now. A name is a message's or a reply's `name`; a message wins when both tables hold it.

Given the home, the store also holds what this host's intake quarantined in `queue/failed/` without
storing it (a FIFO, a link, a payload over queue.max_payload_bytes: gateway/backends/postgres/intake.py), through
the file store; a name in the database wins over a file of that name. A retried file goes back to
incoming/, where the intake takes it in (or quarantines it) again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg

from gateway.home import Home
from gateway.spool import deadletters
from gateway.spool.deadletters import DeadLetter, Kind

_LIST = """
SELECT name, 'message' AS kind, coalesce(reason, ''), attempts, updated_at AS failed_at, conversation
  FROM switchyard_messages WHERE state = 'dead'
UNION ALL
SELECT name, 'reply', coalesce(reason, ''), attempts, coalesce(sent_at, next_attempt_at, created_at), conversation
  FROM switchyard_outbox WHERE state = 'dead'
ORDER BY 5 DESC, 1 DESC
"""


def _letter(row: tuple[Any, ...]) -> DeadLetter:
    name, kind, reason, attempts, failed_at, conversation = row
    table = "switchyard_messages" if kind == "message" else "switchyard_outbox"
    stamp = failed_at.isoformat(timespec="milliseconds").replace("+00:00", "Z") if failed_at else None
    return DeadLetter(name, kind, reason or "no reason recorded", int(attempts), stamp, conversation or None,
                      Path(f"postgres:{table}") / name)


class DeadStore:
    """The dead letters of one database (and of this host's failed/ when given the home), with the file
    store's operations (see gateway/cli/dead.py)."""

    def __init__(self, dsn: str, home: Home | None = None):
        self.dsn = dsn
        self.home = home

    def _connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.dsn)

    def list_dead(self, *, read_payloads: bool = True) -> list[DeadLetter]:
        """Every dead message and reply, and every file quarantined here, newest first (the files' payloads
        unread without `read_payloads`: gateway/deadletters.list_dead)."""
        with self._connect() as conn:
            stored = [_letter(row) for row in conn.execute(_LIST)]
        names = {letter.name for letter in stored}
        local = [letter for letter in self._local(read_payloads) if letter.name not in names]
        return sorted(stored + local, key=lambda letter: (letter.failed_at or "", letter.name), reverse=True)

    def has_local(self) -> bool:
        """Whether this host's failed/ holds any quarantined file."""
        return bool(self._local(read_payloads=False))

    def _local(self, read_payloads: bool = True) -> list[DeadLetter]:
        return deadletters.list_dead(self.home, read_payloads=read_payloads) if self.home is not None else []

    def _local_names(self, names: list[str], stored: dict[str, Kind]) -> list[str]:
        """Those of `names` not in the database: each must be a file in failed/, else KeyError naming the others."""
        local = {letter.name for letter in self._local()}
        rest = [name for name in names if name not in stored]
        unknown = [name for name in rest if name not in local]
        if unknown:
            raise KeyError(", ".join(unknown))
        return rest

    def show(self, name: str) -> tuple[DeadLetter, bytes]:
        """One dead letter and its payload bytes (a message's exactly as received); KeyError when absent."""
        with self._connect() as conn:
            row = conn.execute("SELECT name, 'message', reason, attempts, updated_at, conversation, payload "
                               "FROM switchyard_messages WHERE state = 'dead' AND name = %s", (name,)).fetchone()
            if row is not None:
                return _letter(row[:6]), bytes(row[6])
            row = conn.execute("SELECT name, 'reply', reason, attempts, coalesce(sent_at, next_attempt_at, "
                               "created_at), conversation, payload FROM switchyard_outbox "
                               "WHERE state = 'dead' AND name = %s", (name,)).fetchone()
            if row is not None:
                return _letter(row[:6]), json.dumps(row[6], ensure_ascii=False).encode()
        if self.home is not None:
            return deadletters.show(self.home, name)
        raise KeyError(name)

    def kinds(self, conn: psycopg.Connection[Any], names: list[str]) -> dict[str, Kind]:
        """The kind of each of `names` that is dead (message before reply)."""
        found: dict[str, Kind] = {}
        for (name,) in conn.execute("SELECT name FROM switchyard_outbox WHERE state = 'dead' AND name = ANY(%s)",
                                    (names,)):
            found[name] = "reply"
        for (name,) in conn.execute("SELECT name FROM switchyard_messages WHERE state = 'dead' "
                                    "AND name = ANY(%s)", (names,)):
            found[name] = "message"
        return found

    def retry(self, names: list[str]) -> list[str]:
        """Puts dead letters back (see the module docstring); nothing changes unless every name is dead
        (else KeyError listing the others). Returns the names put back."""
        wanted = list(dict.fromkeys(names))
        with self._connect() as conn, conn.transaction():
            kinds = self.kinds(conn, wanted)
            local = self._local_names(wanted, kinds)
            done = [name for name in wanted if name in kinds and _put_back(conn, name, kinds[name])]
        return done + (deadletters.retry(self.home, local) if self.home is not None and local else [])

    def retry_all(self) -> list[str]:
        """Puts every dead letter back; returns the names put back."""
        with self._connect() as conn, conn.transaction():
            dead = [(row[0], row[1]) for row in conn.execute(_LIST)]
            done = [name for name, kind in sorted(dead) if _put_back(conn, name, kind)]
        local = sorted({letter.name for letter in self._local()} - {name for name, _ in dead})
        return done + (deadletters.retry(self.home, local) if self.home is not None and local else [])

    def drop(self, names: list[str]) -> list[str]:
        """Deletes dead letters for good (KeyError as for `retry`); returns the names deleted."""
        wanted = list(dict.fromkeys(names))
        with self._connect() as conn, conn.transaction():
            kinds = self.kinds(conn, wanted)
            local = self._local_names(wanted, kinds)
            for name in wanted:
                if name in kinds:
                    table = "switchyard_messages" if kinds[name] == "message" else "switchyard_outbox"
                    conn.execute(f"DELETE FROM {table} WHERE name = %s AND state = 'dead'", (name,))  # noqa: S608
        if self.home is not None and local:
            deadletters.drop(self.home, local)
        return wanted

    def where(self, kind: Kind) -> str:
        """Where a retried letter of `kind` goes, as `dead retry` says it."""
        return "outbox" if kind == "reply" else "queue"


def _put_back(conn: psycopg.Connection[Any], name: str, kind: Kind) -> bool:
    """Queues one dead message again in its place, or makes one dead reply pending; False if it was
    no longer dead (retried by another operator meanwhile: the row lock makes that exact)."""
    if kind == "reply":
        row = conn.execute("UPDATE switchyard_outbox SET state = 'pending', attempts = 0, "
                           "next_attempt_at = now(), reason = NULL WHERE name = %s AND state = 'dead' "
                           "RETURNING id", (name,)).fetchone()
        return row is not None
    row = conn.execute("UPDATE switchyard_messages SET state = 'queued', attempts = 0, errors = '[]', "
                       "holder = NULL, due_at = now(), reason = NULL, updated_at = now() "
                       "WHERE name = %s AND state = 'dead' RETURNING id", (name,)).fetchone()
    return row is not None
