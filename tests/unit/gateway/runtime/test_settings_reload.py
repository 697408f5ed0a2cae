"""settings.yaml reloaded in process (gateway/runtime/reload.py): what is applied to a running gateway and what is
named as waiting for a restart; a channel (re)started after a reload gets the profile as reloaded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway import hookimpl
from gateway.app import Gateway
from gateway.home import Home
from gateway.plugin_manager import build_plugin_manager
from gateway.runtime.reload import reloaded, restart_needed
from gateway.settings import ChannelProfile, Settings, load_settings
from gateway.testing import FakeChannel, async_wait_until


class DownChannels:
    """Provides `fake` channels whose platform stays down while `down` is set; keeps each started one's context."""

    def __init__(self) -> None:
        self.down = True
        self.contexts: dict[str, Any] = {}

    @hookimpl
    def switchyard_channels(self, profile: ChannelProfile, context: Any) -> FakeChannel | None:
        if profile.type != "fake":
            return None
        if self.down:
            raise ConnectionRefusedError("platform unreachable")
        self.contexts[profile.id] = context
        return FakeChannel("fake", profile.id)


def _write(path: Path, allow_from: list[str]) -> None:
    path.write_text(yaml.safe_dump({"queue": {"fsync": False},
                                    "channels": [{"id": "late", "type": "fake", "allow_from": allow_from}]}))


async def test_a_channel_started_after_a_reload_admits_the_reloaded_allow_from(
        home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gateway.app.CHANNEL_RETRY_INITIAL_S", 0.01)
    monkeypatch.setattr("gateway.app.CHANNEL_RETRY_MAX_S", 0.05)
    monkeypatch.setattr("gateway.runtime.reload.SETTINGS_CHECK_S", 0.05)
    home.create()
    _write(home.settings_file, ["1001"])
    settings = load_settings(home.settings_file)
    plugin = DownChannels()
    gateway = Gateway(home, settings, build_plugin_manager(settings, extra=[plugin]), settings_file=home.settings_file)
    await gateway.start()
    try:
        assert gateway.channel_status["late"]["state"] == "retrying"
        _write(home.settings_file, ["1001", "1002"])
        await async_wait_until(lambda: gateway.settings.channels[0].allow_from == ["1001", "1002"])
        plugin.down = False
        await async_wait_until(lambda: "late" in plugin.contexts)
        assert plugin.contexts["late"].access.check("1002").allowed
    finally:
        await gateway.stop()


def test_a_profile_that_changed_type_keeps_running_as_it_was_until_a_restart() -> None:
    running = Settings(channels=[ChannelProfile(id="chat", type="telegram", allow_from=["1"])])
    new = Settings(channels=[ChannelProfile(id="chat", type="discord", allow_from=["2"])])
    merged = reloaded(running, new)
    assert merged.channels[0].allow_from == ["1"]  # ids of another platform are not this channel's
    assert restart_needed(merged, new) == ["channel chat: type"]


def test_what_is_applied_and_what_waits_for_a_restart() -> None:
    running = Settings.model_validate({"channels": [{"id": "tg", "type": "telegram", "token_env": "A"}]})
    new = Settings.model_validate({
        "queue": {"backend": "postgres"}, "plugins": ["my.plugin"],
        "providers": {"p": {"command": ["p"]}}, "usage": {"timezone": "Europe/Paris"},
        "channels": [{"id": "tg", "type": "telegram", "token_env": "B", "allow_from": ["7"]},
                     {"id": "dc", "type": "discord"}]})
    merged = reloaded(running, new)
    assert set(merged.providers) == {"p"} and merged.usage.timezone == "Europe/Paris"
    assert merged.channels[0].allow_from == ["7"] and merged.channels[0].option("token_env") == "A"
    assert merged.queue.backend == "files" and [p.id for p in merged.channels] == ["tg"]
    assert restart_needed(merged, new) == ["queue.backend", "channel dc added", "channel tg: token_env", "plugins"]
