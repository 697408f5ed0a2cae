"""PostgreSQL backend tests: a migrated schema per test (`db`), and no `switchyard` process a test started
outlives it, also when it failed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.faults.harness import GatewayRun


@pytest.fixture(autouse=True)
def _no_process_left_running() -> Iterator[None]:
    yield
    for run in GatewayRun.started:
        if run.alive():
            run.kill()
    GatewayRun.started.clear()


@pytest.fixture
def db(pg_dsn: str) -> Iterator[str]:
    """`pg_dsn` with Switchyard's schema migrated; this process's shared pools closed after the test."""
    from gateway.pg import schema
    from gateway.pg.db import close_shared_pools

    schema.migrate(pg_dsn)
    yield pg_dsn
    close_shared_pools()
