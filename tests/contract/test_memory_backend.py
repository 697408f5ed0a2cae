"""The in-memory backend is for tests only: no installed plugin declares it (a settings.yaml naming it is
refused), and a test that registers it gets the memory stores of the state it gave."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.backends.memory import MemoryDeadLetters
from gateway.backends.memory.backend import MemoryBackendPlugin, memory_settings
from gateway.backends.memory.queue import MemoryQueue, QueueState
from gateway.composition import open_backend
from gateway.home import Home
from gateway.plugin_manager import build_plugin_manager
from gateway.settings import Settings, UnknownBackend


def test_no_installed_plugin_declares_it(tmp_path: Path) -> None:
    settings = Settings.model_validate({"queue": {"backend": "memory"}})
    with pytest.raises(UnknownBackend, match="no installed plugin provides the backend 'memory'"):
        open_backend(Home(tmp_path), settings)


def test_a_spooled_message_taken_in_twice_is_queued_once() -> None:
    """A host that dies after putting its spool file on the shared line but before completing the file takes
    it in again when it restarts: the line holds it once (postgres's intake ignores a row it holds)."""
    queue = MemoryQueue(QueueState())
    first = queue.enqueue(b"{}", hint="m1", identity="tg\x1fp\x1fm1")
    assert queue.enqueue(b"{}", hint="m1", identity="tg\x1fp\x1fm1") == first
    queue.enqueue(b"{}", hint="m2", identity="tg\x1fp\x1fm2")
    assert len(queue.state.incoming) == 2


def test_a_registered_plugin_opens_its_state(tmp_path: Path) -> None:
    plugin = MemoryBackendPlugin()
    settings = memory_settings(Settings())
    backend = open_backend(Home(tmp_path), settings, build_plugin_manager(settings, extra=[plugin]))
    assert backend.name == "memory" and not backend.in_home
    dead = backend.dead_letters()
    assert isinstance(dead, MemoryDeadLetters) and dead.state is plugin.state.queue
