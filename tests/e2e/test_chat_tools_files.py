"""`send_file` end to end through each channel: the real MCP server and client, the outbox, and the plugin's real
library against its fake platform: a file arrives natively by its type, with its caption, within the platform's
limit (the plugins' `switchyard_file_limits`), and a file over it is a tool error with nothing sent."""

from __future__ import annotations

import struct
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway import hookimpl
from gateway.api import HandlerContext
from gateway.app import Gateway
from gateway.channelkit.attachments import attachment_folder
from gateway.home import Home
from gateway.models import OutgoingPayload
from gateway.plugin_manager import build_plugin_manager
from gateway.settings import ChatToolsSettings, QueueSettings, Settings
from gateway.telemetry.events import read_events
from gateway.testing import make_incoming, read_json_files
from gateway.testing.conformance import ChannelDriver, ChannelRig, reply, send_like_the_dispatcher
from orchestrator.chattools.client import ToolFailed, connected
from orchestrator.chattools.server import ChatToolServer
from orchestrator.chattools.tools import ChatTools
from tests.fakes.discord_server import DiscordFakeServer
from tests.fakes.slack_server import FakeSlack
from tests.fakes.telegram_server import FakeTelegram
from tests.fakes.whatsapp_server import FakeWhatsApp
from tests.integration.test_discord import TOKEN_ENV as DISCORD_TOKEN_ENV
from tests.integration.test_discord import DiscordDriver
from tests.integration.test_slack import APP_ENV, BOT_ENV, SECRET_ENV, SlackDriver
from tests.integration.test_telegram import TOKEN_ENV as TELEGRAM_TOKEN_ENV
from tests.integration.test_telegram import TelegramDriver
from tests.integration.test_whatsapp import APP_SECRET_ENV, VERIFY_TOKEN_ENV, WhatsAppDriver
from tests.integration.test_whatsapp import TOKEN_ENV as WHATSAPP_TOKEN_ENV

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]

MIB = 1 << 20


def png(width: int = 64, height: int = 48) -> bytes:
    """A real PNG (signature, IHDR, one IDAT, IEND) of that size."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\x00" + b"\x80" * width * 3 for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


MP3 = b"ID3\x03\x00\x00\x00\x00\x00\x00" + b"\xff\xfb\x90\x00" * 64
ZIP = b"PK\x05\x06" + b"\x00" * 18  # an empty archive


class Tooled:
    """A channel started on a fake platform, with the chat tools writing into its outbox."""

    def __init__(self, rig: ChannelRig, driver: ChannelDriver, server: ChatToolServer):
        self.rig, self.driver, self.server = rig, driver, server
        assert rig.context is not None
        self.home = rig.context.home
        self.message = make_incoming("send me the chart", channel=driver.type, channelProfileId="conformance",
                                     conversationId=driver.conversation, senderId="1001",
                                     messageId=f"in-{driver.type}")

    def file(self, name: str, data: bytes = b"", *, size: int | None = None) -> Path:
        """A file in the conversation's own folder (sparse when `size` is given)."""
        folder = attachment_folder(self.home, "conformance", self.driver.conversation)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / name
        with path.open("wb") as handle:
            handle.write(data)
            if size is not None:
                handle.truncate(size)
        return path

    async def send_file(self, path: Path, caption: str = "") -> str:
        """Calls `send_file` as an agent would, then delivers what it wrote as the dispatcher does."""
        scope = f"conv:{self.driver.type}/conformance/{self.driver.conversation}"
        async with self.server.granted(scope, scope, run_id="r1", step_id="Reply", reply_to=self.message,
                                       agent="demo") as endpoint, connected(endpoint) as chat:
            try:
                answer: str = await chat.call("send_file", path=str(path), caption=caption)
            except ToolFailed as exc:
                refused = exc  # raised outside the client's task group, as itself
            else:
                refused = None
        await self.deliver()
        if refused is not None:
            raise refused
        return answer

    async def deliver(self) -> None:
        assert self.rig.channel is not None
        for written in read_json_files(self.home.outgoing):
            await send_like_the_dispatcher(self.rig.channel, OutgoingPayload.model_validate(written))
        for path in self.home.outgoing.glob("*.json"):
            path.unlink()


def plugin_limits() -> dict[str, int]:
    """The file limits the plugins declare, joined as the gateway joins them into HandlerContext.file_limits."""
    declared = build_plugin_manager(Settings()).hook.switchyard_file_limits()
    return {kind: size for limits in declared for kind, size in limits.items()}


@pytest.fixture
async def tooled_for(tmp_path: Path) -> AsyncIterator[Any]:
    started: list[tuple[ChannelRig, ChatToolServer]] = []

    async def start(driver: ChannelDriver) -> Tooled:
        rig = ChannelRig(driver, tmp_path / "home")
        await rig.start()
        assert rig.context is not None
        tools = ChatTools(rig.context.home, ChatToolsSettings(), rig.context.outbox, rig.context.events,
                          file_limits=plugin_limits())
        server = ChatToolServer(tools)
        await server.start()
        started.append((rig, server))
        return Tooled(rig, driver, server)

    yield start
    for rig, server in started:
        await server.stop()
        await rig.stop()


@pytest.fixture
async def slack(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        for name, value in ((BOT_ENV, fake.bot_token), (APP_ENV, fake.app_token), (SECRET_ENV, fake.signing_secret)):
            monkeypatch.setenv(name, value)
        yield fake


@pytest.fixture
async def discord(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[DiscordFakeServer]:
    async with DiscordFakeServer() as fake:
        monkeypatch.setenv(DISCORD_TOKEN_ENV, fake.token)
        yield fake


@pytest.fixture
async def whatsapp(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeWhatsApp]:
    async with FakeWhatsApp() as fake:
        assert isinstance(fake, FakeWhatsApp)
        for name, value in ((WHATSAPP_TOKEN_ENV, fake.token), (APP_SECRET_ENV, fake.app_secret),
                            (VERIFY_TOKEN_ENV, fake.verify_token)):
            monkeypatch.setenv(name, value)
        yield fake


@pytest.fixture
async def telegram(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as fake:
        monkeypatch.setenv(TELEGRAM_TOKEN_ENV, fake.token)
        yield fake


async def test_a_png_arrives_as_a_photo_with_its_caption(telegram: FakeTelegram, tooled_for: Any) -> None:
    tooled = await tooled_for(TelegramDriver(telegram))
    image = png()
    await tooled.send_file(tooled.file("chart.png", image), caption="this week's chart")
    assert [(s.method, s.filename, s.caption, s.data) for s in telegram.sent] == [
        ("sendPhoto", "chart.png", "this week's chart", image)]


async def test_an_mp3_is_audio_and_a_zip_a_document(telegram: FakeTelegram, tooled_for: Any) -> None:
    tooled = await tooled_for(TelegramDriver(telegram))
    await tooled.send_file(tooled.file("song.mp3", MP3))
    await tooled.send_file(tooled.file("logs.zip", ZIP), caption="the logs")
    assert [(s.method, s.filename, s.caption) for s in telegram.sent] == [
        ("sendAudio", "song.mp3", None), ("sendDocument", "logs.zip", "the logs")]


async def test_a_photo_telegram_refuses_goes_once_as_a_document(telegram: FakeTelegram, tooled_for: Any) -> None:
    tooled = await tooled_for(TelegramDriver(telegram))
    telegram.refuse_photos()
    await tooled.send_file(tooled.file("wide.png", png()), caption="wide")
    assert [(s.method, s.filename, s.caption) for s in telegram.sent] == [("sendDocument", "wide.png", "wide")]
    assert telegram.calls.count("sendPhoto") == 1 and telegram.calls.count("sendDocument") == 1


async def test_an_image_beyond_the_photo_dimensions_is_sent_as_a_document(
    telegram: FakeTelegram, tooled_for: Any,
) -> None:
    tooled = await tooled_for(TelegramDriver(telegram))
    await tooled.send_file(tooled.file("strip.png", png(2100, 100)))  # a ratio of 21: sendPhoto refuses it
    assert [s.method for s in telegram.sent] == ["sendDocument"] and "sendPhoto" not in telegram.calls


async def test_a_file_over_the_limit_is_a_tool_error_and_nothing_is_sent(
    telegram: FakeTelegram, tooled_for: Any,
) -> None:
    tooled = await tooled_for(TelegramDriver(telegram))
    with pytest.raises(ToolFailed, match="telegram takes files of up to 50 MB"):
        await tooled.send_file(tooled.file("big.bin", size=60 * MIB))
    assert telegram.sent == [] and list(tooled.home.outgoing.glob("*.json")) == []


async def test_a_reply_naming_a_file_over_50_mb_says_so_and_sends_the_rest(
    telegram: FakeTelegram, tooled_for: Any,
) -> None:
    """A `[send_file:]` of a final answer is not checked by the tool: the channel puts a note in its place rather
    than have Telegram refuse the upload on every retry."""
    tooled = await tooled_for(TelegramDriver(telegram))
    big = tooled.file("big.bin", size=51 * MIB)
    await send_like_the_dispatcher(tooled.rig.channel, reply("the answer", "1001", channel="telegram",
                                                             files=[str(big)]))
    assert [(s.method, s.text) for s in telegram.sent] == [
        ("sendMessage", "the answer\n[file not sent: big.bin is 51.0 MB; Telegram takes files of up to 50 MB]")]
    assert [e["path"] for e in read_events(tooled.home.events_file) if e["event"] == "outgoing.file_refused"] == [
        str(big)]


async def test_a_png_reaches_slack_as_a_file_upload(slack: FakeSlack, tooled_for: Any) -> None:
    tooled = await tooled_for(SlackDriver(slack, "socket"))
    image = png()
    await tooled.send_file(tooled.file("chart.png", image), caption="the chart")
    files = [item for item in slack.sent if item.filename]
    assert [(f.filename, f.data) for f in files] == [("chart.png", image)]
    assert "files.completeUploadExternal" in slack.methods()
    assert [item.text for item in slack.sent if not item.filename] == ["the chart"]


async def test_a_png_reaches_discord_as_an_attachment(discord: DiscordFakeServer, tooled_for: Any) -> None:
    tooled = await tooled_for(DiscordDriver(discord))
    image = png()
    await tooled.send_file(tooled.file("chart.png", image), caption="the chart")
    assert [m.files for m in discord.sent if m.files] == [[("chart.png", image)]]
    with pytest.raises(ToolFailed, match="discord takes files of up to 10 MB"):
        await tooled.send_file(tooled.file("big.bin", size=11 * MIB))


async def test_a_png_reaches_whatsapp_as_an_image(whatsapp: FakeWhatsApp, tooled_for: Any) -> None:
    tooled = await tooled_for(WhatsAppDriver(whatsapp))
    image = png()
    await tooled.send_file(tooled.file("chart.png", image), caption="the chart")
    await tooled.send_file(tooled.file("song.mp3", MP3), caption="a song")
    await tooled.send_file(tooled.file("logs.zip", ZIP))
    assert [_shown(message) for message in whatsapp.recorded.messages] == [
        ("image", "the chart"), ("text", "a song"), ("audio", None), ("document", None)]  # audio takes no caption
    assert (whatsapp.recorded.sent[0].filename, whatsapp.recorded.sent[0].data) == ("chart.png", image)


def _shown(message: dict[str, Any]) -> tuple[str, str | None]:
    """A Cloud API message body's type and what it reads: a text's body, a media message's caption."""
    kind = str(message["type"])
    return kind, message["text"]["body"] if kind == "text" else message[kind].get("caption")


class _LimitsSeen:
    """A handler plugin that remembers the file limits the gateway gave it."""

    def __init__(self) -> None:
        self.limits: dict[str, int] | None = None

    @hookimpl
    def switchyard_handler(self, context: HandlerContext) -> Any:
        self.limits = dict(context.file_limits)
        return _Idle()


class _Idle:
    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def handle(self, message: object) -> list[object]:
        return []


async def test_switchyard_file_limits_of_every_channel_reach_the_handler(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    home.create()
    seen = _LimitsSeen()
    settings = Settings(queue=QueueSettings(fsync=False))
    gateway = Gateway(home, settings, build_plugin_manager(settings, extra=[seen]))
    await gateway.start()
    await gateway.stop()
    assert seen.limits == {"telegram": 50 * MIB, "discord": 10 * MIB, "slack": 1024 * MIB, "whatsapp": 100 * MIB}

