"""Channel capabilities: a channel declaring `reply_named_by_message_id` gets spec 002's `<messageId>.json`
replies whatever its type; core code names no channel."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from gateway import hookimpl
from gateway.app import Gateway
from gateway.home import Home
from gateway.plugin_manager import build_plugin_manager
from gateway.settings import ChannelProfile, QueueSettings, Settings
from gateway.testing import FakeChannel, async_wait_until, drop_incoming, make_incoming
from tests.fakes.orchestrator import NO_CHAT_TOOLS

ROOT = Path(__file__).resolve().parents[3]
CHANNEL_WORDS = {"inbox", "heartbeat"}
NOT_A_CHANNEL = {("orchestrator/config/workflows.py", "inbox")}  # spec 000's agent task-queue folder, `inbox/<agent>/`


class ProbeChannel(FakeChannel):
    """A third-party probe channel that waits for one answer named by its messageId."""

    reply_named_by_message_id = True


class Plugin:
    """Provides a `probe` channel (declaring the capability) and a plain `fake` one."""

    def __init__(self) -> None:
        self.channels: dict[str, FakeChannel] = {}

    @hookimpl
    def switchyard_channels(self, profile: ChannelProfile, context: Any) -> FakeChannel | None:
        kind = {"probe": ProbeChannel, "fake": FakeChannel}.get(profile.type)
        if kind is None:
            return None
        self.channels[profile.id] = kind(profile.type, profile.id)
        return self.channels[profile.id]


async def test_a_channel_declaring_reply_named_by_message_id_gets_message_id_reply_files(home: Home) -> None:
    settings = Settings(chat_tools=NO_CHAT_TOOLS, queue=QueueSettings(fsync=False),
                        channels=[ChannelProfile(id="p1", type="probe"), ChannelProfile(id="f1", type="fake")])
    plugin = Plugin()
    gateway = Gateway(home, settings, build_plugin_manager(settings, extra=[plugin]))
    await gateway.start()
    try:
        probe, plain = plugin.channels["p1"], plugin.channels["f1"]
        await probe.inject("are you there", messageId="probe-7")
        await plain.inject("hello", messageId="chat-7")
        await async_wait_until(lambda: probe.sent and plain.sent)
        await async_wait_until(lambda: len(list(home.sent.glob("*.json"))) == 2)
    finally:
        await gateway.stop()
    names = sorted(p.name for p in home.sent.glob("*.json"))
    assert names[1] == "probe-7.json" and names[0].startswith("fake_chat-7_"), names


class ProbeTypePlugin:
    """Declares the `probe` type's reply name through the hook; no profile of it is configured."""

    @hookimpl
    def switchyard_reply_named_by_message_id(self) -> list[str]:
        return ["probe"]


async def test_switchyard_reply_named_by_message_id_holds_while_no_profile_of_the_type_runs(home: Home) -> None:
    settings = Settings(chat_tools=NO_CHAT_TOOLS, queue=QueueSettings(fsync=False))
    gateway = Gateway(home, settings, build_plugin_manager(settings, extra=[ProbeTypePlugin()]))
    await gateway.start()
    try:
        drop_incoming(home, make_incoming("are you there", channel="probe", channelProfileId="p9",
                                          messageId="probe-9"), "probe-9.json")
        drop_incoming(home, make_incoming("hello", channel="fake", messageId="chat-9"), "chat-9.json")
        await async_wait_until(lambda: len(list(home.outgoing.glob("*.json"))) == 2)
    finally:
        await gateway.stop()
    names = sorted(p.name for p in home.outgoing.glob("*.json"))
    assert names[1] == "probe-9.json" and names[0].startswith("fake_chat-9_"), names


def _channel_words(path: Path) -> list[tuple[str, int]]:
    """The string literals in a module that are a channel's name (any case); text inside an f-string
    is what a person reads, not a value code compares, and is left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    prose = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
    return [(node.value.strip().lower(), node.lineno) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose
            and node.value.strip().lower() in CHANNEL_WORDS]


def test_core_code_names_no_concrete_channel() -> None:
    found = []
    for package in ("gateway", "orchestrator"):
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            found += [f"{relative}:{line} {word!r}" for word, line in _channel_words(path)
                      if (relative, word) not in NOT_A_CHANNEL]
    assert found == [], "core code must read a channel's declared capabilities, not its name"
