"""Fixtures for orchestrator tests: a real home and event log, fake outbox, fake provider scripts."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest  # noqa: E402

from gateway.api import HandlerContext  # noqa: E402
from gateway.home import Home  # noqa: E402
from gateway.settings import ProviderSettings, QueueSettings, Settings  # noqa: E402
from gateway.telemetry.events import EventLog  # noqa: E402
from orchestrator import Orchestrator  # noqa: E402
from tests.fakes.stores import orchestrator_for  # noqa: E402
from tests.orchestrator.orch_helpers import FakeOutbox, Flow, ScriptedSelector  # noqa: E402


@pytest.fixture
def home(tmp_path: Path) -> Home:
    home = Home(tmp_path / "home")
    home.create()
    return home


@pytest.fixture
def outbox() -> FakeOutbox:
    return FakeOutbox()


@pytest.fixture
def events(home: Home) -> Iterator[EventLog]:
    log = EventLog(home.events_file)
    yield log
    log.close()


@pytest.fixture
def script(tmp_path: Path) -> Callable[[str, str], list[str]]:
    """Writes a Python script into tmp_path and returns the argv that runs it."""

    def write(name: str, code: str) -> list[str]:
        path = tmp_path / f"{name}.py"
        path.write_text(textwrap.dedent(code), encoding="utf-8")
        return [sys.executable, str(path)]

    return write


@pytest.fixture
def make_context(home: Home, events: EventLog, outbox: FakeOutbox) -> Callable[..., HandlerContext]:
    """Builds a HandlerContext with the given settings.yaml providers."""

    def build(providers: dict[str, ProviderSettings] | None = None, **extra: Any) -> HandlerContext:
        settings = Settings(providers=providers or {}, queue=QueueSettings(fsync=False))
        return HandlerContext(home=home, settings=settings, events=events, outbox=outbox,
                              queue_stats=lambda: {"incoming": 2, "processing": 1}, **extra)

    return build


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
