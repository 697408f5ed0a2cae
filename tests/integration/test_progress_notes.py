"""Channels that cannot edit a message post each progress note as an ordinary message."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway import ChannelProfile
from gateway.testing.conformance import ChannelRig, reply
from plugins.console.channel import ConsoleChannel
from tests.fakes.whatsapp_server import FakeWhatsApp
from tests.integration.progress_notes import KEY, note
from tests.integration.test_whatsapp import APP_SECRET_ENV, TOKEN_ENV, VERIFY_TOKEN_ENV, WhatsAppDriver

NOTES = ("⏳ working: using Read", "⏳ working: using Edit", "⏳ working: running tests")


async def test_the_console_prints_every_note_like_a_reply() -> None:
    stdout = io.StringIO()
    console = ConsoleChannel(ChannelProfile(id="console", type="console"), stdin=io.StringIO(), stdout=stdout)
    assert getattr(console, "edits_progress", False) is False
    for text in NOTES:
        await console.send(reply(text, "console", channel="console", progressKey=KEY))
    assert stdout.getvalue().splitlines() == [f"[conformance] {text}" for text in NOTES]


@pytest.fixture
async def whatsapp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> AsyncIterator[tuple[ChannelRig, FakeWhatsApp]]:
    async with FakeWhatsApp() as fake:
        assert isinstance(fake, FakeWhatsApp)
        for name, value in ((TOKEN_ENV, fake.token), (APP_SECRET_ENV, fake.app_secret),
                            (VERIFY_TOKEN_ENV, fake.verify_token)):
            monkeypatch.setenv(name, value)
        rig = ChannelRig(WhatsAppDriver(fake), tmp_path / "home")
        await rig.start()
        try:
            yield rig, fake
        finally:
            await rig.stop()


async def test_whatsapp_posts_every_note_as_a_message(whatsapp: tuple[ChannelRig, FakeWhatsApp]) -> None:
    rig, fake = whatsapp
    assert rig.channel is not None and getattr(rig.channel, "edits_progress", False) is False
    assert isinstance(rig.driver, WhatsAppDriver)
    for text in NOTES:
        await rig.channel.send(note(rig.driver, text))
    assert [(item.conversation, item.text) for item in fake.recorded.sent] == [
        (rig.driver.conversation, text) for text in NOTES]
