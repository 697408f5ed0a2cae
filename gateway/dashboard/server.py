"""The dashboard's HTTP server (aiohttp): the page, its JSON state, its plots, `/metrics`, the retry button,
and allow / deny of a pending tool approval."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from importlib import resources
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from gateway.dashboard import page
from gateway.dashboard.connections import Admission, Handler
from gateway.settings import DashboardSettings, is_loopback
from gateway.telemetry.logs import ThrottledLog

log = logging.getLogger("switchyard.dashboard")

COOKIE = "switchyard_dashboard"
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
STATIC_TYPES = {"dashboard.js": "text/javascript", "dashboard.css": "text/css"}
MAX_CONNECTIONS = 64  # a page, a few tabs and a Prometheus scraper need a handful
BACKLOG = 32  # connections the kernel holds for us, and the most asyncio accepts at a time
HEADER_TIMEOUT_S = 10.0  # to send a request's head, from the connection's start or the last answer
BODY_TIMEOUT_S = 10.0  # to send a request's body
MAX_BODY_BYTES = 64 * 1024
LOG_INTERVAL_S = 60.0  # malformed requests and accept errors: one line a minute at most
ACCEPT_ERROR = "socket.accept() out of system resource"  # asyncio's, when the process has no descriptor left


class Source(Protocol):
    """What the server reads and does: the state, the metrics text, a retry, and secret masking."""

    async def state(self) -> dict[str, Any]: ...
    async def glance(self) -> dict[str, Any]: ...
    async def metrics(self) -> bytes: ...
    async def retry(self, names: list[str]) -> list[str]: ...
    async def answer(self, approval_id: str, verdict: str) -> dict[str, Any]: ...
    def redact(self, text: str) -> str: ...


def build_app(source: Source, settings: DashboardSettings, token: str | None, *,
              body_timeout_s: float = BODY_TIMEOUT_S) -> web.Application:
    """The aiohttp application; with a `token`, every request must carry it."""
    app = web.Application(middlewares=[_guard(settings, token)], client_max_size=MAX_BODY_BYTES)
    app.on_response_prepare.append(_secure)
    refresh_ms = int(settings.refresh_sec * 1000)

    async def index(request: web.Request) -> web.Response:  # the plots take a while to draw: off the loop
        html = await asyncio.to_thread(page.page, await source.state(), refresh_ms=refresh_ms)
        return web.Response(text=source.redact(html), content_type="text/html")

    async def sections(request: web.Request) -> web.Response:
        return web.Response(text=source.redact(page.sections(await source.state())), content_type="text/html")

    async def glance(request: web.Request) -> web.Response:
        html = await asyncio.to_thread(page.glance, await source.glance())
        return web.Response(text=source.redact(html), content_type="text/html")

    async def state(request: web.Request) -> web.Response:
        text = json.dumps(await source.state(), default=str, ensure_ascii=False)
        return web.Response(text=source.redact(text), content_type="application/json")

    async def metrics(request: web.Request) -> web.Response:
        response = web.Response(body=await source.metrics())
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    async def retry(request: web.Request) -> web.Response:
        if request.content_type != "application/json":  # a cross-site form cannot send JSON
            return web.json_response({"error": "send a JSON body"}, status=415)
        try:
            async with asyncio.timeout(body_timeout_s):
                body = await request.json()
            names = [str(name) for name in body["names"]]
        except TimeoutError:
            return web.json_response({"error": "the body did not arrive in time"}, status=408)
        except (ValueError, KeyError, TypeError):
            return web.json_response({"error": 'expected {"names": [...]}'}, status=400)
        try:
            retried = await source.retry(names)
        except KeyError as exc:
            return web.json_response({"error": source.redact(f"not a dead letter: {exc.args[0]}")}, status=404)
        return web.json_response({"retried": retried})

    async def answer(request: web.Request) -> web.Response:
        if request.content_type != "application/json":  # a cross-site form cannot send JSON
            return web.json_response({"error": "send a JSON body"}, status=415)
        try:
            async with asyncio.timeout(body_timeout_s):
                body = await request.json()
            approval_id, verdict = str(body["id"]), str(body["verdict"])
        except TimeoutError:
            return web.json_response({"error": "the body did not arrive in time"}, status=408)
        except (ValueError, KeyError, TypeError):
            return web.json_response({"error": 'expected {"id": ..., "verdict": "allow" or "deny"}'}, status=400)
        if verdict not in ("allow", "deny"):
            return web.json_response({"error": 'verdict: "allow" or "deny"'}, status=400)
        try:
            result = await source.answer(approval_id, verdict)
        except KeyError:
            return web.json_response({"error": source.redact(f"no approval {approval_id}")}, status=404)
        except ValueError as exc:
            return web.json_response({"error": source.redact(str(exc))}, status=400)
        return web.json_response(result, status=200 if result["won"] else 409)

    async def static(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in STATIC_TYPES:
            raise web.HTTPNotFound()
        text = resources.files("gateway.dashboard").joinpath(f"static/{name}").read_text("utf-8")
        return web.Response(text=text, content_type=STATIC_TYPES[name])

    app.router.add_get("/", index)
    app.router.add_get("/api/sections", sections)
    app.router.add_get("/api/glance", glance)
    app.router.add_get("/api/state", state)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/api/dead-letters/retry", retry)
    app.router.add_post("/api/approvals/answer", answer)
    app.router.add_get("/static/{name}", static)
    return app


def _guard(settings: DashboardSettings, token: str | None) -> Any:
    """Checks the token (Bearer header, cookie, or `?token=` which sets the cookie), or without a token
    that the request is addressed to this machine (a page elsewhere cannot rebind a name to us)."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if token is None:
            host = (request.url.host or "").strip("[]")
            if not (is_loopback(host) or host == settings.host):
                return _refused(403, "this dashboard answers only to a loopback address")
        else:
            offered = _offered_token(request)
            if offered is None or not hmac.compare_digest(offered.encode(), token.encode()):
                return _refused(401, "unauthorized: send the dashboard token as `Authorization: Bearer …`")
            if "token" in request.query and request.method == "GET":
                clean = request.rel_url.with_query({k: v for k, v in request.query.items() if k != "token"})
                redirect = web.HTTPSeeOther(str(clean))  # the token leaves the address bar and history
                redirect.set_cookie(COOKIE, token, httponly=True, samesite="Strict", path="/")
                raise redirect
        return await handler(request)

    return guard


async def _secure(request: web.Request, response: web.StreamResponse) -> None:
    """Adds the security headers to every answer: the page, errors (401, 403, 404...) and redirects."""
    response.headers.update(SECURITY_HEADERS)


def _offered_token(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    if header.startswith("Bearer "):
        return header.removeprefix("Bearer ").strip()
    if "token" in request.query:
        return request.query["token"]
    return request.cookies.get(COOKIE)


def _refused(status: int, text: str) -> web.Response:
    response = web.Response(status=status, text=text + "\n")
    if status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="switchyard"'
    return response


class Server:
    """Runs the application on the configured host and port until stopped, with at most `max_connections`
    open (connections.Admission), each closed when its request's head does not come within
    `header_timeout_s`; malformed requests and accept errors are logged one line a minute at most."""

    def __init__(self, app: web.Application, settings: DashboardSettings, *,
                 max_connections: int = MAX_CONNECTIONS, header_timeout_s: float = HEADER_TIMEOUT_S):
        self._admission = Admission(max_connections, lambda: self._runner.server)  # set up by `start`
        app.middlewares.insert(0, self._admission.track)
        self._log = ThrottledLog(log, LOG_INTERVAL_S)
        # aiohttp's keep-alive timer also runs from a connection's start: a head not sent in time closes it
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True,  # no token in any log
                                     shutdown_timeout=1.0, keepalive_timeout=header_timeout_s, logger=self._log)
        self._settings = settings
        self._listener: asyncio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fds: set[int] = set()
        self._previous_handler: Any = None
        self.port: int | None = None

    async def start(self) -> str:
        """Binds and serves; returns the address the page is at."""
        await self._runner.setup()
        self._loop = asyncio.get_running_loop()
        self._listener = await self._loop.create_server(self._admission, self._settings.host, self._settings.port,
                                                        backlog=BACKLOG)
        self._fds = {sock.fileno() for sock in self._listener.sockets}
        self._previous_handler = self._loop.get_exception_handler()
        self._loop.set_exception_handler(self._loop_error)
        self.port = int(self._listener.sockets[0].getsockname()[1])
        host = f"[{self._settings.host}]" if ":" in self._settings.host else self._settings.host
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
            self._log.error("dashboard: cannot accept a connection: %s", context.get("exception"))
        elif self._previous_handler is not None:
            self._previous_handler(loop, context)
        else:
            loop.default_exception_handler(context)
