"""P1 on the postgres backend: the same in-process run as bench/throughput.py, with `queue.backend: postgres`.

Each case gets a fresh schema of the database named by SWITCHYARD_DSN (else SWITCHYARD_TEST_DSN),
migrated before and dropped after. The path: the bench channel's sink → `queue/incoming/` → the
intake (one row and its jobs) → Procrastinate → the orchestrator → `switchyard_outbox` → the
profile's owner (this process) → the channel's `send()`.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.rig import bench_settings
from bench.throughput import floor, measured, throughput

DSN_ENV = "SWITCHYARD_BENCH_DSN"  # the variable the bench's settings name: one schema per case


def base_dsn() -> str | None:
    """The database to measure on, or None (then the postgres cases are skipped)."""
    return os.environ.get("SWITCHYARD_DSN") or os.environ.get("SWITCHYARD_TEST_DSN") or None


@contextlib.contextmanager
def fresh_schema(base: str) -> Iterator[str]:
    """A DSN whose search_path is a new, migrated schema; the schema is dropped afterwards."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    from gateway.backends.postgres import schema

    name = f"sy_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    dsn = make_conninfo(base, options=f"-c search_path={name}", application_name=name)
    try:
        schema.migrate(dsn)
        yield dsn
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def server_cpu_s(dsn: str) -> dict[int, float]:
    """CPU seconds so far of each PostgreSQL process serving connections named like this DSN's
    application_name (readable when the server runs on this machine; none otherwise)."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    from bench.process import cpu_seconds

    name = conninfo_to_dict(dsn).get("application_name")
    with psycopg.connect(dsn, autocommit=True, application_name="sy_bench_monitor") as conn:
        pids = [pid for (pid,) in conn.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (name,))]
    seconds = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            seconds[pid] = cpu_seconds(pid)
    return seconds


async def pg_case(scratch: Path, base: str, count: int, conversations: int, *, fsync: bool) -> dict[str, Any]:
    """One P1 case on a fresh schema: the row of bench/throughput.py plus the server's CPU per message
    (its processes' CPU at the end of the run: connections are pooled, so they live through it)."""
    with fresh_schema(base) as dsn:
        os.environ[DSN_ENV] = dsn
        try:
            settings = bench_settings(fsync=fsync, backend="postgres", dsn_env=DSN_ENV)
            row = await throughput(scratch / "pg-case", count, conversations, fsync=fsync, settings=settings,
                                   server_cpu=lambda: server_cpu_s(dsn))
        finally:
            os.environ.pop(DSN_ENV, None)
    return {**row, "backend": "postgres"}


SKIPPED = "skipped: set SWITCHYARD_DSN or SWITCHYARD_TEST_DSN to measure the postgres backend"


async def p1_both(scratch: Path, *, sizes: list[int], conversations: list[int], fsyncs: list[bool],
                  floor_count: int, postgres: bool = True) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | str]:
    """Every P1 case on the file backend (against its floor, as bench.throughput.p1 does) and, right
    after each, the same case on the postgres backend, so both meet the same state of a shared machine.
    Returns (file rows, postgres rows or why they were skipped)."""
    base = base_dsn() if postgres else None
    floor(scratch / "warm-up", floor_count, fsync=fsyncs[0])  # see bench.throughput.p1
    files: list[dict[str, Any]] = []
    pg: list[dict[str, Any]] = []
    for fsync in fsyncs:
        for count in sizes:
            for convs in conversations:
                files.append(await measured(scratch, count, convs, fsync=fsync, floor_count=floor_count))
                if base is not None:
                    pg.append(await pg_case(scratch, base, count, convs, fsync=fsync))
    return files, (pg if base is not None else SKIPPED if postgres else "not measured (--backends without postgres)")
