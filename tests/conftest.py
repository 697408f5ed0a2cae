"""Shared fixtures: a fresh home per test, no proxies, no inherited Switchyard environment, and no
process a test started left running after it (or, checked at the end, after the suite)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from gateway.home import Home
from tests.process import TEST_NODE_VARIABLE, TEST_RUN_VARIABLE, SwitchyardProcess, marked_processes

# Hypothesis draws the same examples on every run (the suite is repeatable); HYPOTHESIS_PROFILE=explore
# draws fresh ones, to look for new failures while editing.
settings.register_profile("repeatable", derandomize=True, database=None)
settings.register_profile("explore")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

pytest_plugins = ["tests.fakes.clis"]  # the `fake_clis` fixture: fake claude, codex, gemini, ollama on PATH

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
RUN_TOKEN = os.environ[TEST_RUN_VARIABLE] = uuid.uuid4().hex  # inherited by every process the suite starts
LEFTOVER_GRACE_S = 10.0  # what a process killed or told to stop at a test's end may take to be gone


@pytest.fixture(scope="session", autouse=True)
def _no_process_outlives_the_suite() -> Iterator[None]:
    """Fails the run when a process started by it (its environment carries RUN_TOKEN) is still alive at the
    end, naming the test that started it; kills it."""
    yield
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    while (left := marked_processes(RUN_TOKEN)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if left:
        pytest.fail(f"{len(left)} process(es) the tests started outlived the suite (killed now):\n"
                    + "\n".join(f"  pid {pid}, {what}" for pid, what in sorted(left.items())), pytrace=False)


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[None]:
    """No proxies or Switchyard settings from outside; this test's name on the processes it starts, and
    every `switchyard` it started through tests/process.py killed (with its process group) after it."""
    for name in (*PROXY_VARIABLES, "SWITCHYARD_HOME", "SWITCHYARD_PLUGINS", "SWITCHYARD_FORCE_POLLING"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(TEST_NODE_VARIABLE, request.node.nodeid)
    yield
    SwitchyardProcess.kill_started()


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


@pytest.fixture
def db(pg_dsn: str) -> Iterator[str]:
    """`pg_dsn` with Switchyard's schema migrated; after the test, the processes it started are killed (before
    the schema is dropped). A store's pool closes with its backend, or when the store is let go."""
    from gateway.backends.postgres import schema

    schema.migrate(pg_dsn)
    yield pg_dsn
    SwitchyardProcess.kill_started()
