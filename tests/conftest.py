"""Shared fixtures: a fresh home per test, no proxies, no inherited Switchyard environment, no process a
test started left running after it (or, checked at the end, after the suite), `pg_dsn`/`db`, and the
orchestrator's (an event log, a fake outbox, a HandlerContext, orchestrator.yaml, orchestrators started and
stopped, scripted selectors and providers), which tests/unit/orchestrator and tests/integration share.

The folders mirror the code, and each gives its tests a marker (`pytest -m unit`, `-m "not e2e"`, …):
  tests/unit/gateway/<package>/, tests/unit/orchestrator/<package>/, tests/unit/plugins/  `unit`
  tests/contract/ (every store rule on memory, files and postgres)                        `contract`
  tests/backends/postgres/ (the PostgreSQL backend, against SWITCHYARD_TEST_DSN)          `postgres`
  tests/integration/ (real libraries, fake servers, agent CLIs and ACP adapters)          `integration`
  tests/e2e/ (`switchyard run` as a process)                                              `e2e`
  tests/faults/ (kill -9, full disks, misbehaving providers, fuzzing)                     `faults`
tests/fakes/ holds the doubles (fake servers, CLIs, ACP agents, the orchestrator's outbox and selector),
built on gateway.testing; a test elsewhere may also carry `e2e` or `faults` by its own mark."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import textwrap
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from gateway.api import HandlerContext
from gateway.home import Home
from gateway.settings import ChatToolsSettings, ProviderSettings, QueueSettings, Settings
from gateway.telemetry.events import EventLog
from orchestrator import Orchestrator
from tests.fakes.orchestrator import FakeOutbox, Flow, ScriptedSelector
from tests.fakes.stores import orchestrator_for
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
TESTS = Path(__file__).resolve().parent
FOLDER_MARKERS = {  # a folder under tests/ -> the marker of every test in it
    ("unit",): pytest.mark.unit,
    ("contract",): pytest.mark.contract,
    ("backends", "postgres"): pytest.mark.postgres,
    ("integration",): pytest.mark.integration,
    ("e2e",): pytest.mark.e2e,
    ("faults",): pytest.mark.faults,
}


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """With `-m unit` alone, the folders FOLDER_MARKERS gives another marker are not imported at all: none of
    their tests could be selected (a folder's marker is every test's in it), and importing them took a tenth of
    the fast loop. Any other selection collects everything."""
    if str(config.getoption("markexpr", "")).strip() != "unit":
        return None
    try:
        parts = collection_path.resolve().relative_to(TESTS).parts
    except ValueError:
        return None
    if any(parts[:len(folder)] == folder for folder, marker in FOLDER_MARKERS.items() if marker.name != "unit"):
        return True
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks each test by the folder it is in (FOLDER_MARKERS)."""
    for item in items:
        parts = item.path.resolve().relative_to(TESTS).parts
        for folder, marker in FOLDER_MARKERS.items():
            if parts[:len(folder)] == folder:
                item.add_marker(marker)


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


@pytest.fixture
def outbox() -> FakeOutbox:
    return FakeOutbox()


@pytest.fixture
def events(home: Home) -> Iterator[EventLog]:
    log = EventLog(home.events_file)
    yield log
    log.close()


@pytest.fixture
def make_context(home: Home, events: EventLog, outbox: FakeOutbox,
                 request: pytest.FixtureRequest) -> Callable[..., HandlerContext]:
    """Builds a HandlerContext with the given settings.yaml providers. A `unit` test's has the chat tools off:
    their HTTP server took a fifth of a second to stop after every test, and tests/unit/orchestrator/chattools
    (and tests/integration, tests/e2e) start them on purpose."""
    tools = ChatToolsSettings(enabled=request.node.get_closest_marker("unit") is None)

    def build(providers: dict[str, ProviderSettings] | None = None, **extra: Any) -> HandlerContext:
        settings = Settings(providers=providers or {}, queue=QueueSettings(fsync=False), chat_tools=tools)
        return HandlerContext(home=home, settings=settings, events=events, outbox=outbox,
                              queue_stats=lambda: {"incoming": 2, "processing": 1}, **extra)

    return build


@pytest.fixture
def script(tmp_path: Path) -> Callable[[str, str], list[str]]:
    """Writes a Python script into tmp_path and returns the argv that runs it."""

    def write(name: str, code: str) -> list[str]:
        path = tmp_path / f"{name}.py"
        path.write_text(textwrap.dedent(code), encoding="utf-8")
        return [sys.executable, str(path)]

    return write


@pytest.fixture
def workspace(home: Home) -> Path:
    """The default orchestrator's workspace (orchestrators/main)."""
    path = home.root / "orchestrators" / "main"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def write_config(workspace: Path) -> Callable[[str], Path]:
    """Writes orchestrators/main/orchestrator.yaml."""

    def write(text: str) -> Path:
        path = workspace / "orchestrator.yaml"
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return write


@pytest.fixture
async def running() -> AsyncIterator[list[Orchestrator]]:
    """Orchestrators started by a test, stopped at its end."""
    started: list[Orchestrator] = []
    yield started
    for orchestrator in started:
        await orchestrator.stop()


@pytest.fixture
def start(running: list[Orchestrator]) -> Callable[[HandlerContext], Any]:
    """Builds and starts an Orchestrator (stopped at the end of the test)."""

    async def build(context: HandlerContext) -> Orchestrator:
        orchestrator = orchestrator_for(context)
        await orchestrator.start()
        running.append(orchestrator)
        return orchestrator

    return build


@pytest.fixture
def selector(tmp_path: Path, script: Callable[[str, str], list[str]]) -> ScriptedSelector:
    return ScriptedSelector(tmp_path, script)


@pytest.fixture
def flow(
    home: Home, outbox: FakeOutbox, make_context: Callable[..., HandlerContext],
    write_config: Callable[[str], Path], start: Callable[..., Any],
) -> Callable[..., Any]:
    """Writes orchestrator.yaml and starts an orchestrator on it: `await flow(yaml, providers=…)`."""

    async def build(config: str, providers: dict[str, ProviderSettings] | None = None) -> Flow:
        write_config(config)
        orchestrator = await start(make_context(providers))
        return Flow(orchestrator, home.root, outbox)

    return build
