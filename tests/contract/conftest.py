"""The `backend` fixture: every contract test runs once per backend, memory, files and postgres (postgres
when SWITCHYARD_TEST_DSN is set: a migrated schema of its own per test, from tests/pg's `db` fixture)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.home import Home
from tests.contract.backends import Backend, FilesBackend, MemoryBackend, PostgresBackend
from tests.pg.conftest import db  # noqa: F401  (pg_dsn with Switchyard's schema migrated)


@pytest.fixture(params=["memory", "files", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    home = Home(tmp_path / "home")
    home.create()
    if request.param == "memory":
        yield MemoryBackend(tmp_path)
    elif request.param == "files":
        yield FilesBackend(home)
    else:
        yield PostgresBackend(request.getfixturevalue("db"), home)
