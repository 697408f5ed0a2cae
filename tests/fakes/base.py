"""A base for fake platform servers: an aiohttp app on 127.0.0.1 with a free port."""

from __future__ import annotations

import asyncio
from types import TracebackType

from aiohttp import web


class FakeServer:
    """Runs `self.app` on 127.0.0.1:<free port> for the duration of an `async with` block.

    Subclasses add routes in `setup_routes` and record what the bot sent.
    """

    def __init__(self) -> None:
        self.app = web.Application(client_max_size=64 * 1024 * 1024)
        self.setup_routes(self.app)
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.changed = asyncio.Event()

    def setup_routes(self, app: web.Application) -> None:
        """Adds the platform's endpoints."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> FakeServer:
        self._runner = web.AppRunner(self.app, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        addresses = self._runner.addresses
        assert addresses, "the fake server did not bind"
        self.port = int(addresses[0][1])
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
