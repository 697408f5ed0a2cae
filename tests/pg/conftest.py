"""PostgreSQL backend tests: a migrated schema per test (`db`); a server of the test's own for the tests
that stop or restart it (`throwaway_pg`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.pg.throwaway import ThrowawayServer, throwaway_server
from tests.process import SwitchyardProcess


@pytest.fixture
def db(pg_dsn: str) -> Iterator[str]:
    """`pg_dsn` with Switchyard's schema migrated; after the test, the processes it started are killed (before
    the schema is dropped). A store's pool closes with its backend, or when the store is let go."""
    from gateway.backends.postgres import schema

    schema.migrate(pg_dsn)
    yield pg_dsn
    SwitchyardProcess.kill_started()


@pytest.fixture
def throwaway_pg() -> Iterator[ThrowawayServer]:
    """A PostgreSQL server of this test's own, with Switchyard's schema migrated into its `postgres`
    database (`.dsn`); `.stop(mode)`, `.start()`, `.restart(mode)`; removed after the test."""
    from gateway.backends.postgres import schema

    with throwaway_server() as server:
        schema.migrate(server.dsn)
        yield server
        SwitchyardProcess.kill_started()
