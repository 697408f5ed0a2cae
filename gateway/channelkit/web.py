"""The HTTP safety pieces every page the gateway serves shares (the dashboard, the web chat channel): security
headers, a same-origin check for requests that change something, a connection cap, and a listener that bounds
slow and malformed clients. Kept here, in the plugin contract, so a channel plugin reuses them instead of a copy."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from importlib import resources
from typing import Any

from aiohttp import web

from gateway.telemetry.logs import ThrottledLog

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; media-src 'self' blob:; "
                               "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
BACKLOG = 32  # connections the kernel holds for us, and the most asyncio accepts at a time
HEADER_TIMEOUT_S = 10.0  # to send a request's head, from the connection's start or the last answer
LOG_INTERVAL_S = 60.0  # malformed requests and accept errors: one line a minute at most
ACCEPT_ERROR = "socket.accept() out of system resource"  # asyncio's, when the process has no descriptor left


async def secure(request: web.Request, response: web.StreamResponse) -> None:
    """An `on_response_prepare` signal: the security headers on every answer (pages, errors, redirects)."""
    response.headers.update(SECURITY_HEADERS)


def static_file(package: str, name: str, types: Mapping[str, str]) -> web.Response:
    """A page's own file `static/<name>` of `package`, as the content type `types` gives it; any other name is
    404 (nothing outside the listed files is served)."""
    if name not in types:
        raise web.HTTPNotFound()
    text = resources.files(package).joinpath(f"static/{name}").read_text("utf-8")
    return web.Response(text=text, content_type=types[name])


def same_origin(request: web.Request) -> bool:
    """Whether the request comes from a page of this very server: its `Origin` names the host and port the
    request was addressed to. Browsers send Origin on every POST and WebSocket handshake, and a page
    elsewhere cannot forge it; a request without one (curl, a script) is no browser's and is refused too
    by callers that want a browser."""
    origin = request.headers.get("Origin")
    if not origin:
        return False
    return origin in (f"{request.scheme}://{request.host}", f"http://{request.host}", f"https://{request.host}")


def refused(status: int, text: str) -> web.Response:
    """A short plain-text refusal (401 carries the Bearer challenge)."""
    response = web.Response(status=status, text=text + "\n")
    if status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="switchyard"'
    return response


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


class Listener:
    """Runs an aiohttp application on `host`:`port` until stopped, with at most `max_connections` open
    (Admission), each closed when its request's head does not come within `header_timeout_s`; malformed
    requests and accept errors are logged one line a minute at most, under `what` (e.g. "dashboard")."""

    def __init__(self, app: web.Application, host: str, port: int, *, max_connections: int,
                 header_timeout_s: float = HEADER_TIMEOUT_S, log: logging.Logger, what: str):
        self._admission = Admission(max_connections, lambda: self._runner.server)  # set up by `start`
        app.middlewares.insert(0, self._admission.track)
        self._log = ThrottledLog(log, LOG_INTERVAL_S)
        # aiohttp's keep-alive timer also runs from a connection's start: a head not sent in time closes it
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True,  # no token in any log
                                     shutdown_timeout=1.0, keepalive_timeout=header_timeout_s, logger=self._log)
        self._host, self._port, self._what = host, port, what
        self._listener: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fds: set[int] = set()
        self._previous_handler: Any = None
        self.port: int | None = None

    async def start(self) -> str:
        """Binds and serves; returns the address the page is at."""
        await self._runner.setup()
        self._loop = asyncio.get_running_loop()
        self._listener = await self._loop.create_server(self._admission, self._host, self._port, backlog=BACKLOG)
        self._fds = {sock.fileno() for sock in self._listener.sockets}
        self._previous_handler = self._loop.get_exception_handler()
        self._loop.set_exception_handler(self._loop_error)
        self.port = int(self._listener.sockets[0].getsockname()[1])
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}/"

    @property
    def sockets(self) -> list[Any]:
        """The listening sockets (asyncio's wrappers)."""
        return list(self._listener.sockets) if self._listener is not None else []

    async def stop(self) -> None:
        """Stops serving (open requests are cancelled)."""
        if self._listener is not None:
            self._listener.close()
        if self._loop is not None and self._loop.get_exception_handler() == self._loop_error:
            self._loop.set_exception_handler(self._previous_handler)
        await asyncio.wait_for(self._runner.cleanup(), timeout=5)

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """Logs the listener's accept errors at a bounded rate (asyncio logs each one, with a traceback, up
        to BACKLOG times a turn); hands everything else to the handler there was before."""
        sock = context.get("socket")
        if context.get("message") == ACCEPT_ERROR and sock is not None and sock.fileno() in self._fds:
            self._log.error("%s: cannot accept a connection: %s", self._what, context.get("exception"))
        elif self._previous_handler is not None:
            self._previous_handler(loop, context)
        else:
            loop.default_exception_handler(context)
