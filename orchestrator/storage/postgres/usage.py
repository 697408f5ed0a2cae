"""UsageRecords on PostgreSQL (`switchyard_usage`), shared by every host: a turn adds to each of its keys' day
rows with one INSERT … ON CONFLICT DO UPDATE (col = col + excluded.col) of all of them, a statement atomic by
itself (one round trip, no `BEGIN`/`COMMIT`), so concurrent adds are each counted once and a turn is counted
for all its keys or for none.

A figure that is no amount is never written (Spent.counted), and one a row holds anyway (NaN, infinite or
negative, written by an older version or by hand) is read as nothing and replaced by the next add to its row,
so a sum is never NaN.

The turns running now are rows of `switchyard_usage_running`, one per reservation and kind. A reservation is one
transaction: a transaction-level advisory lock on each of its keys (64 bits of md5 of the schema, kind and key;
taken in one order by every host, so none waits for another in a cycle), the check on the totals and the live
rows, then its rows. Two reservations sharing a key therefore never check at once, on any host. A row counts
until it is deleted (the turn ended) or its `expires_at` by the database's clock passes (renewed while the turn
runs): a host that died stops counting then; a holder of this host whose process is gone, at once."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from typing import Any

from gateway.backends.postgres.db import SharedPool
from gateway.disk.locks import process_instance
from orchestrator.usage.records import Admit, Spent, holder_gone, new_token, ordered

ROW = "(%s, %s, %s, %s, %s, %s, %s, %s)"
ADD = ("INSERT INTO switchyard_usage AS u (day, kind, key, usd, tokens_in, tokens_out, turns, seconds) "
       "VALUES {rows} ON CONFLICT (day, kind, key) DO UPDATE SET "
       "usd = {usd} + excluded.usd, tokens_in = {tokens_in} + excluded.tokens_in, "
       "tokens_out = {tokens_out} + excluded.tokens_out, turns = {turns} + excluded.turns, "
       "seconds = {seconds} + excluded.seconds")
COLUMNS = ("usd", "tokens_in", "tokens_out", "turns", "seconds")
FLOATS = ("usd", "seconds")  # double precision; the others are bigint


def _counted(column: str, table: str = "") -> str:
    """Whether a row's figure is an amount: at least 0, and finite (NaN sorts above 'Infinity' in PostgreSQL)."""
    name = f"{table}{column}"
    return f"({name} >= 0 AND {name} < 'Infinity'::float8)" if column in FLOATS else f"{name} >= 0"


KEPT = {column: f"CASE WHEN {_counted(column, 'u.')} THEN u.{column} ELSE 0 END" for column in COLUMNS}
SUMS = ", ".join(f"SUM({column}) FILTER (WHERE {_counted(column)})" for column in COLUMNS)


KEY_LOCK = ("pg_advisory_xact_lock(('x' || left(md5(current_schema() || chr(31) || 'usage' || chr(31) || %s "
            "|| chr(31) || %s), 16))::bit(64)::bigint)")
RUNNING = ("SELECT holder, count(*) FROM switchyard_usage_running WHERE kind = %s AND key = %s "
           "AND expires_at > now() GROUP BY holder")
RESERVE = ("INSERT INTO switchyard_usage_running (token, kind, key, holder, expires_at) "
           "SELECT %s, kind, key, %s, now() + make_interval(secs => %s) FROM unnest(%s::text[], %s::text[]) "
           "AS k(kind, key)")


def _spent(usd: float | None, tokens_in: int | None, tokens_out: int | None, turns: int | None,
           seconds: float | None) -> Spent:
    return Spent(float(usd or 0), int(tokens_in or 0), int(tokens_out or 0), int(turns or 0), float(seconds or 0))


class PgUsageRecords:
    """Per-day usage totals in the backend's database."""

    def __init__(self, dsn: str, pool: SharedPool | None = None, *, holder: str | None = None):
        self._pool = pool or SharedPool(dsn)  # its backend's; its own when built alone (tests)
        self.holder = holder or process_instance()  # whose reservations this handle makes

    def add(self, day: date, keys: Mapping[str, str], spent: Spent) -> None:
        spent, _ = spent.counted()
        rows = [(day, kind, key, spent.usd, spent.tokens_in, spent.tokens_out, spent.turns, spent.seconds)
                for kind, key in sorted(keys.items())]  # one row order for every host: no deadlock between them
        if not rows:
            return
        # the rows are inserted (and their day rows locked) in this order; one key per kind, so no two conflict
        with self._pool.lone() as conn:
            statement = ADD.format(rows=", ".join([ROW] * len(rows)), **KEPT)
            conn.execute(statement, [value for row in rows for value in row])

    def totals(self, kind: str, key: str, first: date, last: date) -> Spent:
        with self._pool.connection() as conn:
            return _totals(conn, kind, key, first, last)

    def table(self, kind: str, first: date, last: date) -> list[tuple[str, Spent]]:
        with self._pool.connection() as conn:
            rows = conn.execute(f"SELECT key, {SUMS} FROM switchyard_usage WHERE kind = %s "
                                "AND day BETWEEN %s AND %s GROUP BY key", (kind, first, last)).fetchall()
        return ordered({str(key): _spent(*sums) for key, *sums in rows})

    def reset(self, kind: str, key: str | None, first: date, last: date) -> int:
        with self._pool.connection() as conn:
            cursor = conn.execute("DELETE FROM switchyard_usage WHERE kind = %s AND (%s::text IS NULL OR key = %s) "
                                  "AND day BETWEEN %s AND %s", (kind, key, key, first, last))
            return int(cursor.rowcount)

    def running(self, kind: str, key: str) -> int:
        with self._pool.connection() as conn:
            return _running(conn, kind, key)

    def reserve(self, keys: Mapping[str, str], admit: Admit, ttl_s: float) -> str:
        ordered_keys = sorted(keys.items())
        token = new_token()
        with self._pool.connection() as conn, conn.transaction():
            if ordered_keys:
                conn.execute("SELECT " + ", ".join([KEY_LOCK] * len(ordered_keys)),
                             [part for kind_key in ordered_keys for part in kind_key])
            conn.execute("DELETE FROM switchyard_usage_running WHERE expires_at <= now()")
            admit(_Ledger(conn))
            conn.execute(RESERVE, (token, self.holder, ttl_s, [kind for kind, _ in ordered_keys],
                                   [key for _, key in ordered_keys]))
        return token

    def renew(self, token: str, ttl_s: float) -> None:
        with self._pool.lone() as conn:
            conn.execute("UPDATE switchyard_usage_running SET expires_at = now() + make_interval(secs => %s) "
                         "WHERE token = %s", (ttl_s, token))

    def release(self, token: str) -> None:
        with self._pool.lone() as conn:
            conn.execute("DELETE FROM switchyard_usage_running WHERE token = %s", (token,))


class _Ledger:
    """A reservation's view of the totals and the running turns, inside its transaction."""

    def __init__(self, conn: Any):
        self._conn = conn

    def totals(self, kind: str, key: str, first: date, last: date) -> Spent:
        return _totals(self._conn, kind, key, first, last)

    def running(self, kind: str, key: str) -> int:
        return _running(self._conn, kind, key)


def _totals(conn: Any, kind: str, key: str, first: date, last: date) -> Spent:
    row = conn.execute(f"SELECT {SUMS} FROM switchyard_usage WHERE kind = %s AND key = %s AND day BETWEEN %s AND %s",
                       (kind, key, first, last)).fetchone()
    return _spent(*row) if row else Spent()


def _running(conn: Any, kind: str, key: str) -> int:
    """The live reservations of a key, but those of a holder of this host whose process is gone."""
    return sum(int(count) for holder, count in conn.execute(RUNNING, (kind, key)).fetchall()
               if not holder_gone(str(holder)))
