"""The run store on the postgres backend: runs, their events and the conversation → run association as
rows every host reads (switchyard_runs, switchyard_run_events, switchyard_active_runs).

A run's folder (workspace, outputs/, request files) stays a local folder under the home. Writes go
through its backend's shared pool, each as one statement in autocommit (its parts data-modifying
CTEs: atomic as any statement, one round trip, no `BEGIN`/`COMMIT`): a save carries the events
appended for that run since the last one (an event appended after a save waits for the run's next
save, `events` or `close_events`; a crash may lose such an event, never a state). `durable=False`
commits with `synchronous_commit` off (set for that statement's transaction only): the promise of the
file store's unsynced write, losing it in a crash only makes a step run again. A run's end is always
committed durably: its result goes out right after it. Reads are lone statements in autocommit too.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from gateway.backends.postgres.db import SharedPool
from gateway.backends.postgres.errors import database_away
from gateway.disk.locks import process_instance
from gateway.home import Home, safe_name
from gateway.storable import safe_json, storable
from gateway.telemetry.events import utc_now_iso
from orchestrator.runs.base import JOB_LOCK_PREFIX, RunStoreBase
from orchestrator.runs.jobs import iso
from orchestrator.runs.state import RunState, finished_at, stored_conversation_key

log = logging.getLogger("switchyard.orchestrator.runs")

FINISHED_SQL = "('done', 'failed_final', 'cancelled')"
COLUMNS = "run_id, conv_key, state, created_at, updated_at, next_retry_at, delivered, data"
SAVE = f"""
INSERT INTO switchyard_runs ({COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s::json)
ON CONFLICT (run_id) DO UPDATE SET conv_key = EXCLUDED.conv_key, state = EXCLUDED.state,
    updated_at = EXCLUDED.updated_at, next_retry_at = EXCLUDED.next_retry_at, delivered = EXCLUDED.delivered,
    data = EXCLUDED.data
"""
EVENTS = ("INSERT INTO switchyard_run_events (run_id, record) "
          "SELECT %s, value FROM json_array_elements(%s::json) WITH ORDINALITY AS e(value, n) ORDER BY n")
SET_ACTIVE = ("INSERT INTO switchyard_active_runs (conv_key, run_id) VALUES (%s, %s) "
              "ON CONFLICT (conv_key) DO UPDATE SET run_id = EXCLUDED.run_id")
ADD_ACTIVE = ("INSERT INTO switchyard_active_runs (conv_key, run_id) VALUES (%s, %s) "
              "ON CONFLICT (conv_key) DO NOTHING")
DROP_ACTIVE = "DELETE FROM switchyard_active_runs WHERE run_id = %s"
ACTIVE_FOR = ("SELECT r.run_id, r.data::text FROM switchyard_active_runs a JOIN switchyard_runs r USING (run_id) "
              f"WHERE a.conv_key = %s AND r.state NOT IN {FINISHED_SQL}")
DROP_ENDED = ("DELETE FROM switchyard_active_runs a WHERE NOT EXISTS (SELECT 1 FROM switchyard_runs r "
              f"WHERE r.run_id = a.run_id AND r.state NOT IN {FINISHED_SQL})")
# Columns only: a claim never parses `data` in the database, so no run's JSON can fail every claim.
# Queued runs, due first, oldest first; not those whose job lock another live process holds (one that
# heartbeat in switchyard_processes within `live`): reserved for a message waiting there, they would only
# be refused. A holder not listed there, or gone quiet, is left to the lock's own takeover rules.
QUEUED = ("SELECT r.run_id, r.next_retry_at FROM switchyard_runs r WHERE r.state = 'queued' AND NOT EXISTS ("
          "SELECT 1 FROM switchyard_locks l JOIN switchyard_processes p USING (holder) "
          "WHERE l.resource = %(prefix)s || r.run_id AND l.holder <> %(holder)s AND l.expires_at > now() "
          "AND p.last_seen > now() - make_interval(secs => %(live)s)) "
          "ORDER BY r.next_retry_at IS NOT NULL AND r.next_retry_at > now(), r.created_at, r.run_id "
          "LIMIT %(limit)s")
ASYNC_COMMIT = "SELECT set_config('synchronous_commit', 'off', true)"  # for the statement's own transaction
UNREADABLE = f"UPDATE switchyard_runs SET state = 'failed_final' WHERE run_id = %s AND state NOT IN {FINISHED_SQL}"
PENDING_EVENTS_MAX = 64  # a run's events held back for its next save at most


class PgRunStore(RunStoreBase):
    """The run store on the database: the interface and lifecycle of RunStoreBase, shared by every host."""

    shared = True

    def __init__(self, home: Home, dsn: str, *, fsync: bool = True, pool: SharedPool | None = None,
                 live_sec: float = 15.0):
        super().__init__(home, fsync=fsync)
        self.pool = pool or SharedPool(dsn)  # its backend's; its own when built alone (tests)
        self._live_sec = live_sec  # a process that heartbeat this recently is alive (queue.lease_sec)
        self._pending: dict[str, list[dict[str, Any]]] = {}  # events waiting for their run's next write
        self._unsynced: set[str] = set()  # runs whose last write was committed without waiting for the WAL

    # --- writing ------------------------------------------------------------------------------

    def _write(self, statements: list[tuple[str, Any]], *, durable: bool, runs: Iterable[str] = (),
               ending: bool = False) -> None:
        """Runs `statements` (each writing rows no other of them touches) as one statement: one round trip,
        atomic, committed with `synchronous_commit` off unless `durable` (and `queue.fsync`) or `ending`: a
        run's end is committed durably whatever `fsync` says, as its result goes out only after it (lost in a
        crash of the database, the run would run again on another host and its result go out twice)."""
        durable = (durable and self._fsync) or ending
        if durable and len(statements) == 1:
            sql, params = statements[0]
        else:
            parts = [f"w{n} AS ({sql})" for n, (sql, _) in enumerate(statements)]
            params = [value for _, values in statements for value in values]
            if not durable:
                parts.insert(0, f"a AS ({ASYNC_COMMIT})")
            # a CTE that only reads runs when it is read: `a` is, so it sets the mode of the commit
            sql = f"WITH {', '.join(parts)} {'SELECT 1' if durable else 'SELECT count(*) FROM a'}"
        with self.pool.lone() as conn:
            conn.execute(sql, params)
        if durable:  # a synchronous commit flushes the WAL up to it: every earlier commit is durable too
            self._unsynced.clear()
        else:
            self._unsynced.update(runs)

    def _in_order(self, statements: list[tuple[str, Any]]) -> None:
        """Runs `statements` one after another in one transaction, committed with `synchronous_commit`
        off: for statements on the same rows, which the CTEs of one statement cannot be."""
        with self.pool.connection() as conn, conn.pipeline(), conn.transaction():
            conn.execute("SET LOCAL synchronous_commit TO off")
            for sql, params in statements:
                conn.execute(sql, params)

    def _events_of(self, run_id: str) -> list[tuple[str, Any]]:
        pending = self._pending.pop(run_id, None)
        if not pending:
            return []
        return [(EVENTS, (run_id, _storable_json(json.dumps(pending, ensure_ascii=False, default=str))))]

    def _save_statements(self, run: RunState) -> list[tuple[str, Any]]:
        row = (run.runId, stored_conversation_key(run.message), run.state, run.createdAt, run.updatedAt,
               run.job.next_retry_at, run.delivery is not None, _data(run))
        statements: list[tuple[str, Any]] = [(SAVE, row), *self._events_of(run.runId)]
        if run.finished:
            statements.append((DROP_ACTIVE, (run.runId,)))
        return statements

    def save(self, run: RunState, *, durable: bool = True) -> RunState:
        """Writes the run's row (stamping `updatedAt`) with its pending events; an ended run leaves the
        conversation → run association in the same transaction."""
        run = run.model_copy(update={"updatedAt": utc_now_iso()})
        self._write(self._save_statements(run), durable=durable, runs=[run.runId], ending=run.finished)
        return run

    def _save_with_event(self, run: RunState, durable: bool, event: str, **fields: Any) -> RunState:
        self.append_event(run.runId, event, **fields)
        return self.save(run, durable=durable)

    def create(self, run: RunState, key: str | None, *, durable: bool = True) -> RunState:
        """Stores a new run, its `run.created` event and (given `key`) its active-run entry at once."""
        self.append_event(run.runId, "run.created", workflowId=run.workflowId)
        run = run.model_copy(update={"updatedAt": utc_now_iso()})
        statements = self._save_statements(run)
        if key is not None:
            statements.append((SET_ACTIVE, (key, run.runId)))
        self._write(statements, durable=durable, runs=[run.runId])
        return run

    def sync(self, run_id: str) -> None:
        """Makes the run's last write durable: a synchronous commit (it flushes the WAL up to itself)."""
        if self._fsync and run_id in self._unsynced:
            self._write([("SELECT txid_current()", ())], durable=True)

    def append_event(self, run_id: str, event: str, **fields: Any) -> None:
        """Holds one event for the run's next write (written at once past PENDING_EVENTS_MAX)."""
        record = {"ts": utc_now_iso(), "event": event, **{k: v for k, v in fields.items() if v is not None}}
        pending = self._pending.setdefault(run_id, [])
        pending.append(record)
        if len(pending) >= PENDING_EVENTS_MAX:
            self.close_events(run_id)

    def close_events(self, run_id: str | None = None) -> None:
        """Writes the events still held for a run (None: for every run)."""
        statements = [s for key in ([run_id] if run_id is not None else list(self._pending))
                      for s in self._events_of(key)]
        if statements:
            self._write(statements, durable=False)

    def set_active(self, key: str, run_id: str) -> None:
        """Associates a conversation with a run."""
        self._write([(SET_ACTIVE, (key, run_id))], durable=True)

    def restore_active(self, unfinished: list[RunState]) -> None:
        """At start: drops the entries of ended runs and points each conversation without an unfinished
        run at its newest unfinished run."""
        newest: dict[str, str] = {}
        for run in unfinished:  # oldest first: the newest wins
            newest[stored_conversation_key(run.message)] = run.runId
        statements: list[tuple[str, Any]] = [(DROP_ENDED, ())]
        statements += [(ADD_ACTIVE, item) for item in newest.items()]
        self._in_order(statements)

    def remove(self, run_id: str) -> bool:
        """Deletes the run's rows and events, then this host's folder of it."""
        with self.pool.connection() as conn, conn.transaction():
            conn.execute("DELETE FROM switchyard_run_events WHERE run_id = %s", (run_id,))
            conn.execute(DROP_ACTIVE, (run_id,))
            gone = conn.execute("DELETE FROM switchyard_runs WHERE run_id = %s", (run_id,)).rowcount
        self.remove_folder(run_id)
        return bool(gone)

    # --- cancel requests ------------------------------------------------------------------------

    def request_cancel(self, run_id: str) -> None:
        """Asks the host executing the run to cancel it (a column its executor polls)."""
        self._write([("UPDATE switchyard_runs SET cancel_requested_at = now() WHERE run_id = %s", (run_id,))],
                    durable=True)

    def cancel_requests(self, run_ids: Iterable[str]) -> set[str]:
        ids = list(run_ids)
        if not ids:
            return set()
        return {str(row[0]) for row in self._query(
            "SELECT run_id FROM switchyard_runs WHERE run_id = ANY(%s) AND cancel_requested_at IS NOT NULL", (ids,))}

    def clear_cancel(self, run_id: str) -> None:
        self._write([("UPDATE switchyard_runs SET cancel_requested_at = NULL WHERE run_id = %s "
                      "AND cancel_requested_at IS NOT NULL", (run_id,))], durable=False)

    # --- reading --------------------------------------------------------------------------------

    def _query(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        """Rows of one query, in autocommit (a lone statement is atomic by itself: no BEGIN, no COMMIT)."""
        with self.pool.lone() as conn:
            rows: list[tuple[Any, ...]] = conn.execute(sql, params).fetchall()
        return rows

    def _runs(self, where: str, params: Any = (), order: str = "created_at, run_id") -> list[RunState]:
        rows = self._query(f"SELECT run_id, data::text FROM switchyard_runs {where} ORDER BY {order}", params)
        return [run for run_id, data in rows if (run := self._parsed(run_id, data)) is not None]

    def load(self, run_id: str) -> RunState | None:
        """The run with this id, or None when there is none (or the id is not a valid name)."""
        if safe_name(run_id) != run_id:
            return None
        rows = self._query("SELECT data::text FROM switchyard_runs WHERE run_id = %s", (run_id,))
        return self._parsed(run_id, rows[0][0]) if rows else None

    def read(self, run_id: str) -> RunState | None:
        """`load`: a stored run that is not one is marked failed_final as it is read (`_parsed`)."""
        return self.load(run_id)

    def quarantine(self, run_id: str, reason: str) -> RunState | None:
        """Ends a run that cannot be claimed (marked failed_final, its data kept for the operator)."""
        log.error("run %s is marked failed_final, its data kept: %s", run_id, reason)
        self._write([(UNREADABLE, (run_id,))], durable=True)
        return None

    def unreadable(self) -> list[tuple[str, str]]:
        """None to end here: a row that is not a run is marked failed_final as it is read."""
        return []

    def transient(self, exc: BaseException) -> bool:
        """Whether a failure is the database (or the disk) away now rather than that run's."""
        return isinstance(exc, OSError) or database_away(exc)

    def _parsed(self, run_id: str, data: str) -> RunState | None:
        """The stored run; None, as the file store answers for a state.json it cannot read, for one that is
        not a run (written by another version, or by hand): it is marked failed_final, so no claim or
        listing stops at it again, and its data is left for the operator."""
        try:
            return RunState.model_validate_json(data)
        except ValidationError as exc:
            log.error("run %s cannot be read (marked failed_final, its data kept): %s", run_id, exc)
            self._write([(UNREADABLE, (run_id,))], durable=False)
            return None

    def events(self, run_id: str, limit: int = 20) -> list[dict[str, Any]]:
        """The last `limit` events of a run, oldest first."""
        self.close_events(run_id)
        rows = self._query("SELECT record FROM (SELECT id, record FROM switchyard_run_events WHERE run_id = %s "
                           "ORDER BY id DESC LIMIT %s) last ORDER BY id", (run_id, limit))
        return [dict(row[0]) for row in rows]

    def active_runs(self) -> dict[str, str]:
        """The conversation key → run id association (an entry goes when its run ends)."""
        return {str(key): str(run_id) for key, run_id in self._query(
            "SELECT conv_key, run_id FROM switchyard_active_runs")}

    def active_for(self, key: str) -> RunState | None:
        """The unfinished run associated with a conversation, if any (one query)."""
        rows = self._query(ACTIVE_FOR, (key,))
        return self._parsed(*rows[0]) if rows else None

    def all_runs(self) -> list[RunState]:
        return self._runs("")

    def recent(self, limit: int) -> list[RunState]:
        return self._runs("", order=f"updated_at DESC, run_id DESC LIMIT {int(limit)}")

    def last_for(self, key: str) -> RunState | None:
        """The conversation's newest run, finished or not (one query by its conversation key)."""
        runs = self._runs("WHERE conv_key = %s", (key,), order="created_at DESC, run_id DESC LIMIT 1")
        return runs[0] if runs else None

    def unfinished(self) -> list[RunState]:
        return self._runs(f"WHERE state NOT IN {FINISHED_SQL}")

    def needing_recovery(self) -> list[RunState]:
        return self._runs(f"WHERE state NOT IN {FINISHED_SQL} OR NOT delivered")

    def finished_before(self, cutoff: datetime) -> list[RunState]:
        """Finished runs that ended (their job's finished_at, else their last update) before `cutoff`. Columns
        only pick the candidates, as for a claim (a NUL in one row's JSON would fail a query reading into
        `data` for every run): a run ends after it was created, so `created_at` finds every one."""
        candidates = self._runs(f"WHERE state IN {FINISHED_SQL} AND created_at < %s", (cutoff,))
        return [run for run in candidates if (ended := finished_at(run)) is not None and ended < cutoff]

    def queued(self, limit: int) -> list[tuple[str, str | None]]:
        """(run id, next_retry_at) of queued runs: those due first, oldest first (the executor's claims),
        without those another live process holds (QUEUED)."""
        params = {"prefix": JOB_LOCK_PREFIX, "holder": process_instance(), "live": self._live_sec, "limit": limit}
        return [(str(run_id), iso(retry) if retry else None) for run_id, retry in self._query(QUEUED, params)]

    def running_ids(self) -> list[str]:
        """The runs some host marked running (the executor checks their locks for a dead host's)."""
        return [str(row[0]) for row in self._query("SELECT run_id FROM switchyard_runs WHERE state = 'running'")]


def _data(run: RunState) -> str:
    """The run as JSON the database can read back: a NUL or a lone surrogate (in a step's output, say)
    becomes U+FFFD (gateway.storable), since one `\\u0000` in `data` fails every query reading into it."""
    try:
        return _storable_json(run.model_dump_json())
    except PydanticSerializationError:  # a lone surrogate cannot be encoded at all
        return safe_json(run.model_dump(mode="json")).decode()


def _storable_json(text: str) -> str:
    return text if storable(text) else safe_json(json.loads(text)).decode()
