"""Shared fixtures: a fresh home per test, no proxies, no inherited Switchyard environment."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from gateway.home import Home

# Hypothesis draws the same examples on every run (the suite is repeatable); HYPOTHESIS_PROFILE=explore
# draws fresh ones, to look for new failures while editing.
settings.register_profile("repeatable", derandomize=True, database=None)
settings.register_profile("explore")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

pytest_plugins = ["tests.fakes.clis"]  # the `fake_clis` fixture: fake claude, codex, gemini, ollama on PATH

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*PROXY_VARIABLES, "SWITCHYARD_HOME", "SWITCHYARD_PLUGINS", "SWITCHYARD_FORCE_POLLING"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Home]:
    created = Home(tmp_path / "home")
    created.create()
    yield created


@pytest.fixture
def pg_dsn() -> Iterator[str]:
    """A DSN whose search_path is a fresh schema of the test database (SWITCHYARD_TEST_DSN), dropped after.

    Skips with a reason when SWITCHYARD_TEST_DSN is unset (a fresh machine without PostgreSQL); `.ci/run`
    sets it, and fails when the server cannot be reached.
    """
    base = os.environ.get("SWITCHYARD_TEST_DSN")
    if not base:
        pytest.skip("SWITCHYARD_TEST_DSN is not set: no PostgreSQL to test the postgres backend against")
    import uuid

    import psycopg
    from psycopg.conninfo import make_conninfo

    schema = f"sy_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield make_conninfo(base, options=f"-c search_path={schema}")
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
