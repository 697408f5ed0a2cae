"""PostgreSQL backend tests: a server of the test's own for the tests that stop or restart it (`throwaway_pg`);
the migrated schema per test (`db`) is tests/conftest.py's, shared with tests/contract."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.backends.postgres.throwaway import ThrowawayServer, throwaway_server
from tests.process import SwitchyardProcess


@pytest.fixture
def throwaway_pg() -> Iterator[ThrowawayServer]:
    """A PostgreSQL server of this test's own, with Switchyard's schema migrated into its `postgres`
    database (`.dsn`); `.stop(mode)`, `.start()`, `.restart(mode)`; removed after the test."""
    from gateway.backends.postgres import schema

    with throwaway_server() as server:
        schema.migrate(server.dsn)
        yield server
        SwitchyardProcess.kill_started()
