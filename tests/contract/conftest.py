"""The `backend` fixture: every contract test runs once per backend, memory, files and postgres (postgres
when SWITCHYARD_TEST_DSN is set: a migrated schema of its own per test, tests/conftest.py's `db`), the same
tests on each."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.home import Home
from tests.contract.backends import PG_DSN_ENV, Backend, FilesHarness, MemoryHarness, PostgresHarness


@pytest.fixture(params=["memory", "files", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    home = Home(tmp_path / "home")
    home.create()
    backend: Backend
    if request.param == "memory":
        backend = MemoryHarness(home)
    elif request.param == "files":
        backend = FilesHarness(home)
    else:
        dsn = request.getfixturevalue("db")
        request.getfixturevalue("monkeypatch").setenv(PG_DSN_ENV, dsn)
        backend = PostgresHarness(dsn, home)
    yield backend
    backend.close()
