"""The `backend` fixture: every contract test runs once per backend, memory, files and postgres (postgres
when SWITCHYARD_TEST_DSN is set: a migrated schema of its own per test, tests/conftest.py's `db`). A test module
whose store the postgres backend has no object for names it in PG_LACKS: its postgres runs skip with the
reason, before any schema is made."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.home import Home
from tests.contract.backends import PG_DSN_ENV, PG_LACKS, Backend, FilesBackend, MemoryBackend, PostgresBackend


@pytest.fixture(params=["memory", "files", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    home = Home(tmp_path / "home")
    home.create()
    backend: Backend
    if request.param == "memory":
        backend = MemoryBackend(home)
    elif request.param == "files":
        backend = FilesBackend(home)
    else:
        lacking = getattr(request.module, "PG_LACKS", None)
        if lacking is not None:  # before a schema is made and migrated for nothing
            pytest.skip(PG_LACKS[lacking])
        dsn = request.getfixturevalue("db")
        request.getfixturevalue("monkeypatch").setenv(PG_DSN_ENV, dsn)
        backend = PostgresBackend(dsn, home)
    yield backend
    backend.close()
