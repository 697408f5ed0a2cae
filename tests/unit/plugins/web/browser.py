"""A browser user of the web chat, as aiohttp speaks for one: signs in with a login link, keeps the session
cookie, sends what the page sends (its Origin and header), and reads a conversation over the WebSocket."""

from __future__ import annotations

import json
import uuid
from typing import Any

import aiohttp

from plugins.web.channel import WebChannel


class Browser:
    """One signed-in user of the chat at `channel.url` (close it when done)."""

    def __init__(self, channel: WebChannel, user: str):
        assert channel.url is not None
        self.url = channel.url.rstrip("/")
        self.user = user
        self.origin = self.url
        self.session = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))  # 127.0.0.1 cookies
        self._token = channel.logins.issue(user, 60)

    async def sign_in(self) -> None:
        async with self.session.get(f"{self.url}/?t={self._token}") as response:
            assert response.status == 200, response.status

    def headers(self, **extra: str) -> dict[str, str]:
        return {"Origin": self.origin, "X-Switchyard-Chat": "1", **extra}

    async def post(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        async with self.session.post(f"{self.url}{path}", json=body, headers=self.headers()) as response:
            return response.status, await response.json(content_type=None)

    async def say(self, conversation: str, text: str, client_id: str | None = None) -> tuple[int, dict[str, Any]]:
        return await self.post("/api/send", {"conversation": conversation, "text": text,
                                             "id": client_id or uuid.uuid4().hex})

    async def upload(self, conversation: str, name: str, data: bytes, *, mime: str = "text/plain",
                     seconds: float | None = None, caption: str = "") -> tuple[int, dict[str, Any]]:
        form = aiohttp.FormData()
        form.add_field("id", uuid.uuid4().hex)
        form.add_field("text", caption)
        if seconds is not None:
            form.add_field("seconds", str(seconds))
        form.add_field("file", data, filename=name, content_type=mime)
        async with self.session.post(f"{self.url}/api/upload?c={conversation}", data=form,
                                     headers=self.headers()) as response:
            return response.status, await response.json(content_type=None)

    async def read(self, conversation: str, after: int = 0) -> list[dict[str, Any]]:
        """The entries a tab opening the conversation gets, up to `synced`."""
        entries = []
        async with self.session.ws_connect(f"{self.url}/ws?c={conversation}&after={after}",
                                           headers={"Origin": self.origin}) as ws:
            async for message in ws:
                entry = json.loads(message.data)
                if entry["kind"] == "synced":
                    break
                entries.append(entry)
        return entries

    async def close(self) -> None:
        await self.session.close()
