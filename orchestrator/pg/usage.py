"""UsageRecords on PostgreSQL (`switchyard_usage`), shared by every host: a turn adds to each of its keys' day
rows with one INSERT … ON CONFLICT DO UPDATE (col = col + excluded.col) of all of them, a statement atomic by
itself (one round trip, no `BEGIN`/`COMMIT`), so concurrent adds are each counted once and a turn is counted
for all its keys or for none.

A figure that is no amount is never written (Spent.counted), and one a row holds anyway (NaN, infinite or
negative, written by an older version or by hand) is read as nothing and replaced by the next add to its row,
so a sum is never NaN."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date

from gateway.pg.db import SharedPool
from orchestrator.usage import Spent, ordered

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


def _spent(usd: float | None, tokens_in: int | None, tokens_out: int | None, turns: int | None,
           seconds: float | None) -> Spent:
    return Spent(float(usd or 0), int(tokens_in or 0), int(tokens_out or 0), int(turns or 0), float(seconds or 0))


class PgUsageRecords:
    """Per-day usage totals in the backend's database."""

    def __init__(self, dsn: str, pool: SharedPool | None = None):
        self._pool = pool or SharedPool(dsn)  # its backend's; its own when built alone (tests)

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
            row = conn.execute(f"SELECT {SUMS} FROM switchyard_usage WHERE kind = %s AND key = %s "
                               "AND day BETWEEN %s AND %s", (kind, key, first, last)).fetchone()
        return _spent(*row) if row else Spent()

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
