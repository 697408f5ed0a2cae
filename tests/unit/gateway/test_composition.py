"""The backend is composed once (gateway/composition.py): backends and stores are declared by plugins, and
every store a command, a channel or the handler uses comes from the backend the settings configure."""

from __future__ import annotations

from typing import Any

import pytest

from gateway import hookimpl
from gateway.backends.files.backend import FileBackend
from gateway.channelkit.access import AccessPolicy, PairingStore
from gateway.composition import open_backend, open_store
from gateway.disk.locks import LockDirectory
from gateway.home import Home
from gateway.plugin_manager import build_plugin_manager
from gateway.settings import ChannelProfile, QueueSettings, Settings, SettingsError, UnknownBackend
from gateway.stores import StoreKey, Stores
from orchestrator.storage.files.runs import RunStore
from orchestrator.storage.stores import open_history, open_run_store, open_sessions


class ThirdBackend(FileBackend):
    """A backend declared by a plugin: the file backend's stores under another name."""

    name = "third"


class Third:
    @hookimpl
    def switchyard_backends(self) -> dict[str, Any]:
        return {"third": ThirdBackend}

    @hookimpl
    def switchyard_stores(self) -> Stores:
        return {"notes": {"third": lambda backend, **options: ("notes of", backend.name, options)}}


def test_switchyard_backends_declares_a_backend_that_is_opened_by_its_name(home: Home) -> None:
    pm = build_plugin_manager(Settings(), extra=[Third()])
    backend = open_backend(home, Settings(), pm, name="third")
    assert isinstance(backend, ThirdBackend) and backend.home is home
    with pytest.raises(UnknownBackend, match="provides the backend 'fourth'.*files, postgres, third"):
        open_backend(home, Settings(), pm, name="fourth")


def test_switchyard_stores_are_opened_on_the_backend_that_declares_them(home: Home) -> None:
    pm = build_plugin_manager(Settings(), extra=[Third()])
    third = open_backend(home, Settings(), pm, name="third")
    assert third.store(StoreKey("notes"), limit=3) == ("notes of", "third", {"limit": 3})
    files = open_backend(home, Settings(), pm)
    with pytest.raises(KeyError, match="no plugin declares the store 'notes' on the backend 'files'"):
        files.store(StoreKey("notes"))
    with pytest.raises(KeyError):
        open_store(files, {}, StoreKey("runs"))


def test_the_file_backend_opens_the_homes_stores(home: Home) -> None:
    backend = open_backend(home, Settings(queue=QueueSettings(fsync=False)))
    assert backend.name == "files" and backend.in_home
    assert isinstance(backend.pairing(), PairingStore)
    locks = backend.locks(holder="me", ttl_s=5)
    # lock files (no file runtime of this process on the home: SoloLocks keeps none in memory)
    assert locks.acquire("r") and [LockDirectory.read(p).resource for p in (home.coordination / "locks").iterdir()] \
        == ["r"]
    runs = open_run_store(backend)
    assert type(runs) is RunStore and runs.all_runs() == []
    open_sessions(backend)
    history = open_history(backend)
    history.add("scope", "hello", "hi")
    assert history.recent("scope")[-1]["user"] == "hello"


def test_pairing_is_never_assumed_to_be_the_homes_file(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    """No silent fallback to the home's file: a profile with pairing needs the backend's store (a channel's
    context.access has it), and a home configured for postgres opens the database's approvals (the store
    connects only when used, so no server is needed to see which it is)."""
    with pytest.raises(ValueError, match="context.access"):
        AccessPolicy(home, ChannelProfile(id="p", type="x", pairing=True))
    assert AccessPolicy(home, ChannelProfile(id="p", type="x")).check("anyone").allowed  # no pairing: no store
    monkeypatch.setenv("SY_TEST_COMPOSITION_DSN", "postgresql://nobody@127.0.0.1:9/none")
    settings = Settings.model_validate({"queue": {"backend": "postgres", "dsn_env": "SY_TEST_COMPOSITION_DSN"}})
    assert type(open_backend(home, settings).pairing()).__name__ == "PgPairingStore"
    assert isinstance(open_backend(home, Settings()).pairing(), PairingStore)


def test_settings_may_name_a_backend_a_plugin_declares(home: Home) -> None:
    """`queue.backend` is any name a plugin declares: the settings pick the third backend, and an unknown name is
    a settings error naming what is available (what `check` and `run` print), not a traceback."""
    pm = build_plugin_manager(Settings(), extra=[Third()])
    third = Settings.model_validate({"queue": {"backend": "third"}})
    assert isinstance(open_backend(home, third, pm), ThirdBackend)
    with pytest.raises(SettingsError, match="queue.backend: no installed plugin provides the backend 'fifth'"):
        open_backend(home, Settings.model_validate({"queue": {"backend": "fifth"}}), pm)
    with pytest.raises(ValueError, match="backend"):
        Settings.model_validate({"queue": {"backend": "../files"}})
