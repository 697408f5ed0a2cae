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
