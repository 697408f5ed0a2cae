"""The plugin manager: entry points, module lists, isolation of broken plugins, documented hooks."""

from __future__ import annotations

import inspect
import json
import sys
import textwrap
from pathlib import Path

import pytest

from gateway import hookimpl, hookspecs
from gateway.api import ChannelContext, FunctionSpec, Handler, HandlerContext
from gateway.app import Gateway
from gateway.cli import main
from gateway.home import Home
from gateway.outbox import FileOutbox
from gateway.plugin_manager import build_plugin_manager, call_each
from gateway.settings import ChannelProfile, QueueSettings, Settings
from gateway.telemetry.events import EventLog, read_events
from gateway.testing import async_wait_until

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
    for name in ("pigeon_plugin", "broken_plugin", "status_bomb"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return tmp_path


def _context(home: Home, profile: ChannelProfile) -> ChannelContext:
    events = EventLog(home.events_file)
    return ChannelContext(home=home, settings=Settings(channels=[profile]), profile=profile, events=events,
                          outbox=FileOutbox(home, events, fsync=False))


def test_switchyard_channels_of_an_entry_point_plugin_build_its_channel(site: Path, home: Home) -> None:
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


class _Functions:
    """Declares one function, and a handler that remembers the functions the gateway gathered."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    @hookimpl
    def switchyard_functions(self) -> list[FunctionSpec]:
        return [FunctionSpec(name="still_here", description="survives a broken neighbour",
                             parameters={"type": "object"}, call=_noop)]

    @hookimpl
    def switchyard_handler(self, context: HandlerContext) -> Handler:
        self.seen = [f.name for f in context.functions]
        return _IdleHandler()


class _IdleHandler:
    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def handle(self, message: object) -> list[object]:
        return []


async def _noop(arguments: dict[str, object]) -> str:
    return "ok"


class BrokenFunctions:
    """A plugin whose declarations raise."""

    @hookimpl
    def switchyard_functions(self) -> list[FunctionSpec]:
        raise RuntimeError("functions exploded")

    @hookimpl
    def switchyard_providers(self) -> dict[str, object]:
        raise RuntimeError("providers exploded")


async def test_a_plugin_whose_declarations_raise_is_skipped_and_the_gateway_starts(
        home: Home, caplog: pytest.LogCaptureFixture) -> None:
    good = _Functions()
    settings = Settings(queue=QueueSettings(fsync=False))
    gateway = Gateway(home, settings, build_plugin_manager(settings, extra=[BrokenFunctions(), good]))
    await gateway.start()
    try:
        assert "still_here" in good.seen
        assert "heartbeat_check" in good.seen  # the built-in plugins' functions too
        failed = await async_wait_until(
            lambda: [e for e in read_events(home.events_file) if e["event"] == "plugin.failed"])
        assert {(e["plugin"], e["hook"]) for e in failed} == {
            ("BrokenFunctions", "switchyard_functions"), ("BrokenFunctions", "switchyard_providers")}
        assert "functions exploded" in failed[0]["reason"] or "functions exploded" in failed[1]["reason"]
        assert "BrokenFunctions" in caplog.text and "switchyard_functions" in caplog.text
    finally:
        await gateway.stop()


STATUS_BOMB = '''
from gateway import hookimpl

@hookimpl
def switchyard_status(home, settings):
    raise RuntimeError("status exploded")

@hookimpl
def switchyard_init(home, settings):
    raise RuntimeError("init exploded")
'''


def test_a_plugin_whose_status_raises_leaves_the_rest_of_status(
        site: Path, home: Home, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    (site / "status_bomb.py").write_text(textwrap.dedent(STATUS_BOMB))
    home.create()
    home.settings_file.write_text("plugins: [status_bomb]\n")
    assert main(["--home", str(home.root), "status", "--json"]) == 3  # 3: no gateway runs on this home
    status = json.loads(capsys.readouterr().out)
    assert "queue" in status and "runs" in status  # the orchestrator's section is still there
    assert "plugin status_bomb failed in switchyard_status and is skipped: status exploded" in caplog.text
    assert main(["--home", str(home.root), "init"]) == 0
    assert (home.orchestrators / "main" / "orchestrator.yaml").exists()
    assert "plugin status_bomb failed in switchyard_init" in caplog.text


def test_call_each_keeps_the_call_order_and_skips_wrappers() -> None:
    class First:
        @hookimpl
        def switchyard_channel_types(self) -> list[str]:
            return ["first"]

    class Second:
        @hookimpl
        def switchyard_channel_types(self) -> list[str]:
            return ["second"]

    pm = build_plugin_manager(extra=[First(), Second()])
    assert call_each(pm, "switchyard_channel_types") == pm.hook.switchyard_channel_types()
