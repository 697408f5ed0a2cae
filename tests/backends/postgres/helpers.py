"""Shared by the PostgreSQL tests of the operator's commands: a home set to the postgres backend, the
`switchyard` command run as a process with SWITCHYARD_DSN, and rows inserted as the queue would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg


def pg_home(root: Path, extra: str = "") -> Path:
    """A home whose settings select the postgres backend (DSN in SWITCHYARD_DSN)."""
    home = root / "home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "settings.yaml").write_text("queue:\n  backend: postgres\n  dsn_env: SWITCHYARD_DSN\n" + extra)
    return home


def switchyard(home: Path, dsn: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    """`switchyard --home HOME ARGS…` as a user runs it, with SWITCHYARD_DSN set to `dsn`."""
    env = {k: v for k, v in os.environ.items() if k != "SWITCHYARD_DSN"}
    if dsn is not None:
        env["SWITCHYARD_DSN"] = dsn
    return subprocess.run([sys.executable, "-m", "gateway.cli", "--home", str(home), *args],
                          capture_output=True, text=True, env=env, timeout=60)


def payload(message_id: str, conversation: str = "c1", **extra: Any) -> bytes:
    """An incoming payload's bytes, as a channel writes them."""
    return json.dumps({"channel": "console", "message": f"hello {message_id}", "timestamp": 1,
                       "messageId": message_id, "senderId": "u1", "conversationId": conversation, **extra}).encode()


def insert_message(conn: psycopg.Connection[Any], name: str, data: bytes, *, state: str = "queued",
                   keys: tuple[str, ...] = ("conv:console/console/c1",), reason: str | None = None,
                   attempts: int = 0) -> int:
    """One switchyard_messages row, waiting for any worker when `state` is queued."""
    row = conn.execute(
        "INSERT INTO switchyard_messages (name, payload, channel, profile, conversation, keys, state, attempts, "
        "errors, reason, gate_open) VALUES (%s, %s, 'console', 'console', 'c1', %s, %s, %s, %s, %s, %s) RETURNING id",
        (name, data, list(keys), state, attempts, json.dumps(["boom"] * attempts), reason, state == "dead"),
    ).fetchone()
    assert row is not None
    return int(row[0])


def insert_reply(conn: psycopg.Connection[Any], name: str, *, state: str = "pending", reason: str | None = None,
                 attempts: int = 0) -> int:
    """One switchyard_outbox row."""
    body = {"channel": "console", "message": f"reply {name}", "timestamp": 1, "messageId": name,
            "conversationId": "c1"}
    row = conn.execute(
        "INSERT INTO switchyard_outbox (name, channel, profile, conversation, payload, state, attempts, reason, "
        "next_attempt_at) VALUES (%s, 'console', 'console', 'c1', %s, %s, %s, %s, now() + interval '1 hour') "
        "RETURNING id", (name, json.dumps(body), state, attempts, reason)).fetchone()
    assert row is not None
    return int(row[0])


def rows(dsn: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """The rows one query returns, on a connection of its own."""
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql, params).fetchall()


__all__ = ["insert_message", "insert_reply", "payload", "pg_home", "rows", "switchyard"]


def worker_parts(home: Any, settings: Any, events: Any, queue: Any) -> Any:
    """The RuntimeParts a `switchyard worker` process gives its runtime (no channels: none is started), for a
    test that runs the postgres Processing under the one runtime without a Gateway around it."""
    import functools

    from gateway.backends.runtime import RuntimeParts
    from gateway.runtime.sending import Sender
    from gateway.runtime.supervision import ChannelSupervisor
    from gateway.runtime.worker import Worker

    async def no_channel(profile: Any) -> Any:
        raise AssertionError("a worker starts no channel")

    supervisor = ChannelSupervisor(no_channel, events, on_change=lambda: None, spawn=lambda coroutine, name: None)
    return RuntimeParts(home=home, settings=settings, events=events, queue=queue, role="worker",
                        supervisor=supervisor, worker=functools.partial(Worker, events=events, settings=settings.queue),
                        wants_receipt=lambda message: False, receipt_profiles=list, named_by_message_id=(),
                        on_written=lambda name, payload: None,
                        send_loop=functools.partial(Sender, events=events, settings=settings.queue))


def pg_runtime(parts: Any) -> tuple[Any, Any]:
    """(the one runtime, its PgProcessing) on `parts`, as PostgresBackend.runtime composes them (no copy of the
    events into switchyard_events)."""
    from gateway.backends.postgres.processing import PgProcessing
    from gateway.runtime.composed import ComposedRuntime

    processing = PgProcessing(parts)
    return ComposedRuntime(parts, processing), processing
