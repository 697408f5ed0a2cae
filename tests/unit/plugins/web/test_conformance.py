"""The web chat against the conformance kit: a browser user (aiohttp, with the page's cookie, Origin and header)
drives the channel's own server; what the bot sent is what the conversation's log shows every tab."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway import ChannelContext, ChannelProfile
from gateway.testing.conformance import ChannelConformance, ChannelDriver, SentItem
from plugins.web.channel import WebChannel
from tests.unit.plugins.web.browser import Browser


class WebDriver(ChannelDriver):
    type = "web"
    conversation = "1001:1"
    splits_text = False  # one bubble holds 64,000 characters
    supports_rate_limit = False  # the channel is its own platform: nothing between it and the page fails
    supports_own_messages = False  # the bot does not type into the page
    supports_refusal = False
    supports_buttons = True

    def __init__(self) -> None:
        self.channel: WebChannel | None = None
        self.browsers: dict[str, Browser] = {}
        self.every_browser: list[Browser] = []

    def profile_options(self) -> dict[str, Any]:
        return {"port": 0}

    def build_channel(self, profile: ChannelProfile, context: ChannelContext) -> WebChannel:
        channel = super().build_channel(profile, context)
        assert isinstance(channel, WebChannel)
        self.channel = channel
        self.browsers = {}
        return channel

    async def browser(self, user: str) -> Browser:
        if user not in self.browsers:
            assert self.channel is not None
            self.browsers[user] = Browser(self.channel, user)
            self.every_browser.append(self.browsers[user])
            await self.browsers[user].sign_in()
        return self.browsers[user]

    async def user_says(self, text: str, *, sender_id: str = "1001", sender: str = "Ada",
                        file: tuple[str, bytes] | None = None) -> None:
        browser = await self.browser(sender_id)
        conversation = f"{sender_id}:1"
        if file is not None:
            await browser.upload(conversation, file[0], file[1], caption=text)
        else:
            await browser.say(conversation, text)

    def sent(self) -> list[SentItem]:
        assert self.channel is not None
        items: dict[int, SentItem] = {}
        for entry in self.channel.transcript.entries(self.conversation):
            if entry["kind"] == "message" and entry.get("from") != "user":
                file = entry.get("file")
                items[entry["seq"]] = SentItem(
                    conversation=self.conversation, text=entry["text"] or None,
                    filename=file["name"] if file else None, data=Path(file["path"]).read_bytes() if file else None,
                    buttons=[(str(i), str(label)) for i, label in entry.get("buttons", [])])
            elif entry["kind"] == "edit" and entry["target"] in items:
                items[entry["target"]].text = entry["text"]
        return list(items.values())

    async def user_taps(self, button_id: str, *, sender_id: str = "1001", sender: str = "Ada") -> Any:
        assert self.channel is not None
        shown = [e for e in self.channel.transcript.entries(self.conversation) if e.get("buttons")]
        tap = {"conversation": self.conversation, "ref": str(shown[-1]["seq"]), "button": button_id}
        await (await self.browser(sender_id)).post("/api/tap", tap)
        return sender_id, tap

    async def tap_again(self, tap: Any) -> None:
        sender_id, body = tap
        await (await self.browser(sender_id)).post("/api/tap", body)

    async def close(self) -> None:
        for browser in self.every_browser:
            await browser.close()


class TestWebConformance(ChannelConformance):
    @pytest.fixture
    async def driver(self) -> AsyncIterator[WebDriver]:
        driver = WebDriver()
        yield driver
        await driver.close()
