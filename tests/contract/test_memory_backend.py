"""The in-memory backend is for tests only: settings.yaml cannot choose it, no installed plugin declares it,
and a test that registers it gets the memory stores of the state it gave."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from gateway.composition import open_backend
from gateway.home import Home
from gateway.memory import MemoryDeadLetters
from gateway.memory.backend import MemoryBackendPlugin, memory_settings
from gateway.plugin_manager import build_plugin_manager
from gateway.settings import Settings


def test_settings_cannot_choose_the_memory_backend() -> None:
    with pytest.raises(ValidationError, match="backend"):
        Settings.model_validate({"queue": {"backend": "memory"}})


def test_no_installed_plugin_declares_it(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="no installed plugin provides the backend 'memory'"):
        open_backend(Home(tmp_path), memory_settings(Settings()))


def test_a_registered_plugin_opens_its_state(tmp_path: Path) -> None:
    plugin = MemoryBackendPlugin()
    settings = memory_settings(Settings())
    backend = open_backend(Home(tmp_path), settings, build_plugin_manager(settings, extra=[plugin]))
    assert backend.name == "memory" and not backend.in_home
    dead = backend.dead_letters()
    assert isinstance(dead, MemoryDeadLetters) and dead.state is plugin.state.queue
