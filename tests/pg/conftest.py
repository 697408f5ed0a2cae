"""PostgreSQL backend tests: a migrated schema per test (`db`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.process import SwitchyardProcess


@pytest.fixture
def db(pg_dsn: str) -> Iterator[str]:
    """`pg_dsn` with Switchyard's schema migrated; after the test, the processes it started are killed and
    this process's shared pools closed (before the schema is dropped)."""
    from gateway.pg import schema
    from gateway.pg.db import close_shared_pools

    schema.migrate(pg_dsn)
    yield pg_dsn
    SwitchyardProcess.kill_started()
    close_shared_pools()
