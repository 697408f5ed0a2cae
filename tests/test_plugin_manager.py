"""The plugin manager: entry points, module lists, isolation of broken plugins, documented hooks."""

from __future__ import annotations

import inspect
import sys
import textwrap
from pathlib import Path

import pytest

from gateway import hookspecs
from gateway.api import ChannelContext
from gateway.events import EventLog
from gateway.home import Home
from gateway.outbox import FileOutbox
from gateway.plugin_manager import build_plugin_manager
from gateway.settings import ChannelProfile, Settings

PIGEON = '''
from gateway import hookimpl

class Pigeon:
    name = "pigeon"
    def __init__(self, profile):
        self.profile_id = profile.id
    async def start(self, sink): ...
    async def send(self, outgoing): ...
    async def stop(self): ...

@hookimpl
def switchyard_channel_types():
    return ["pigeon"]

@hookimpl
def switchyard_channels(profile, context):
    return Pigeon(profile) if profile.type == "pigeon" else None
'''


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("pigeon_plugin", "broken_plugin"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return tmp_path


def _context(home: Home, profile: ChannelProfile) -> ChannelContext:
    events = EventLog(home.events_file)
    return ChannelContext(home=home, settings=Settings(channels=[profile]), profile=profile, events=events,
                          outbox=FileOutbox(home, events, fsync=False))


def test_a_channel_installed_through_the_entry_point_group_is_found(site: Path, home: Home) -> None:
    (site / "pigeon_plugin.py").write_text(textwrap.dedent(PIGEON))
    dist = site / "switchyard_pigeon-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: switchyard-pigeon\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[switchyard.plugins]\npigeon = pigeon_plugin\n")
    pm = build_plugin_manager()
    profile = ChannelProfile(id="coop", type="pigeon")
    channel = pm.hook.switchyard_channels(profile=profile, context=_context(home, profile))
    assert channel is not None and channel.profile_id == "coop"
    assert "pigeon" in {t for types in pm.hook.switchyard_channel_types() for t in types}


def test_modules_named_in_settings_or_environment_are_loaded(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (site / "pigeon_plugin.py").write_text(textwrap.dedent(PIGEON))
    assert build_plugin_manager(Settings(plugins=["pigeon_plugin"])).has_plugin("pigeon_plugin")
    monkeypatch.setenv("SWITCHYARD_PLUGINS", "pigeon_plugin")
    assert build_plugin_manager().has_plugin("pigeon_plugin")


def test_a_broken_plugin_is_skipped_and_the_rest_still_load(site: Path, caplog: pytest.LogCaptureFixture) -> None:
    (site / "broken_plugin.py").write_text("raise RuntimeError('boom at import')\n")
    pm = build_plugin_manager(Settings(plugins=["broken_plugin"]))
    assert not pm.has_plugin("broken_plugin")
    assert pm.has_plugin("plugins.console") and pm.has_plugin("orchestrator.plugin")
    assert "broken_plugin failed to import" in caplog.text


def test_every_hook_has_an_implementation_among_the_built_in_plugins() -> None:
    pm = build_plugin_manager()
    implemented = {name for name in dir(pm.hook) if name.startswith("switchyard_")
                   and getattr(pm.hook, name).get_hookimpls()}
    declared = {name for name, _ in inspect.getmembers(hookspecs, inspect.isfunction) if name.startswith("switchyard_")}
    assert declared - implemented <= {"switchyard_event"}, declared - implemented
