"""WhatsApp's one-tap answers against the fake Cloud API: interactive reply buttons when Meta's limits
allow them (three buttons, titles of 20 characters, a body of 1,024), a numbered list otherwise, and a
tap (button_reply) taken in as a payload with `button` from the conversation it answers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.testing import async_wait_until
from gateway.testing.conformance import reply, send_like_the_dispatcher
from tests.fakes.whatsapp_server import FakeWhatsApp
from tests.integration.test_whatsapp import APP_SECRET_ENV, TOKEN_ENV, VERIFY_TOKEN_ENV, WhatsAppDriver, running

pytestmark = pytest.mark.timeout(60)
ADA = "15551234567"


@pytest.fixture
async def server(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeWhatsApp]:
    async with FakeWhatsApp() as fake:
        monkeypatch.setenv(TOKEN_ENV, fake.token)
        monkeypatch.setenv(APP_SECRET_ENV, fake.app_secret)
        monkeypatch.setenv(VERIFY_TOKEN_ENV, fake.verify_token)
        yield fake


def labelled(*labels: str) -> list[dict[str, str]]:
    return [{"id": f"ap:q1:{n}", "label": label} for n, label in enumerate(labels)]


async def test_three_short_buttons_are_reply_buttons_and_a_tap_comes_back(server: FakeWhatsApp, tmp_path: Path) -> None:
    async with running(WhatsAppDriver(server), tmp_path / "home") as rig:
        assert rig.channel is not None
        await send_like_the_dispatcher(rig.channel, reply("Deploy?", ADA, channel="whatsapp",
                                                          buttons=labelled("Yes", "No", "Later")))
        [body] = server.recorded.messages
        assert (body["type"], body["interactive"]["type"], body["interactive"]["body"]["text"]) == (
            "interactive", "button", "Deploy?")
        tap = server.button_reply("ap:q1:2", sender_id=ADA)
        assert await server.post_event(server.event([tap])) == 200
        [payload] = await async_wait_until(rig.incoming)
        assert (payload["conversationId"], payload["button"], payload["message"], payload["messageId"]) == (
            ADA, "ap:q1:2", "Later", tap["id"])


@pytest.mark.parametrize(("text", "labels"), [
    ("Which one?", ("One", "Two", "Three", "Four")),  # more than three buttons
    ("Which one?", ("Allow this command once", "Deny")),  # a title over 20 characters
    ("x" * 1100, ("Yes", "No")),  # a body over 1,024 characters
], ids=["four-buttons", "long-title", "long-body"])
async def test_buttons_whatsapp_cannot_show_become_a_numbered_list(
    server: FakeWhatsApp, tmp_path: Path, text: str, labels: tuple[str, ...]
) -> None:
    async with running(WhatsAppDriver(server), tmp_path / "home") as rig:
        assert rig.channel is not None
        await send_like_the_dispatcher(rig.channel, reply(text, ADA, channel="whatsapp", buttons=labelled(*labels)))
        assert [body["type"] for body in server.recorded.messages] == ["text"]
        numbered = "\n".join(f"{n}. {label}" for n, label in enumerate(labels, 1))
        assert server.recorded.sent[-1].text is not None and numbered in server.recorded.sent[-1].text
