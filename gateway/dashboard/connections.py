"""The dashboard's connection cap: a stranger's idle connections can neither use up the process's file
descriptors (which the queue, its files and its agents need) nor lock the token holder out."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Admission:
    """The listener's protocol factory: hands each new connection to aiohttp's server while fewer than
    `cap` are open. At the cap, a new connection closes the oldest one not answering a request (an idle
    flood is replaced by whoever comes next, the token holder too); when every one is answering, the
    new connection is closed at once. `server()` is the aiohttp server connections are handed to (the
    runner's, set up before the listener accepts any)."""

    def __init__(self, cap: int, server: Callable[[], web.Server | None]):
        self.cap = cap
        self._server = server
        self._busy: set[Any] = set()  # the connections (aiohttp RequestHandlers) answering a request

    def __call__(self) -> asyncio.BaseProtocol:
        server = self._server()
        assert server is not None
        live = [handler for handler in server.connections if handler.connected]  # oldest first
        if len(live) >= self.cap:
            idle = next((handler for handler in live if handler not in self._busy), None)
            if idle is None:
                return _Refused()
            idle.force_close()
        return server()

    @web.middleware
    async def track(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Marks the request's connection busy while it is answered (the middleware before all others)."""
        self._busy.add(request.protocol)
        try:
            return await handler(request)
        finally:
            self._busy.discard(request.protocol)


class _Refused(asyncio.Protocol):
    """Closes a connection as soon as it is accepted."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if isinstance(transport, asyncio.Transport):
            transport.abort()
        else:
            transport.close()
