"""The dashboard's HTTP server (aiohttp): the page, its JSON state, `/metrics`, and the retry button."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from gateway.dashboard import page
from gateway.settings import DashboardSettings, is_loopback

log = logging.getLogger("switchyard.dashboard")

COOKIE = "switchyard_dashboard"
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
STATIC_TYPES = {"dashboard.js": "text/javascript", "dashboard.css": "text/css"}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Source(Protocol):
    """What the server reads and does: the state, the metrics text, a retry, and secret masking."""

    async def state(self) -> dict[str, Any]: ...
    async def metrics(self) -> bytes: ...
    async def retry(self, names: list[str]) -> list[str]: ...
    def redact(self, text: str) -> str: ...


def build_app(source: Source, settings: DashboardSettings, token: str | None) -> web.Application:
    """The aiohttp application; with a `token`, every request must carry it."""
    app = web.Application(middlewares=[_guard(settings, token)])
    refresh_ms = int(settings.refresh_sec * 1000)

    async def index(request: web.Request) -> web.Response:
        html = page.page(await source.state(), refresh_ms=refresh_ms)
        return web.Response(text=source.redact(html), content_type="text/html")

    async def sections(request: web.Request) -> web.Response:
        return web.Response(text=source.redact(page.sections(await source.state())), content_type="text/html")

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
            body = await request.json()
            names = [str(name) for name in body["names"]]
        except (ValueError, KeyError, TypeError):
            return web.json_response({"error": 'expected {"names": [...]}'}, status=400)
        try:
            retried = await source.retry(names)
        except KeyError as exc:
            return web.json_response({"error": source.redact(f"not a dead letter: {exc.args[0]}")}, status=404)
        return web.json_response({"retried": retried})

    async def static(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in STATIC_TYPES:
            raise web.HTTPNotFound()
        text = resources.files("gateway.dashboard").joinpath(f"static/{name}").read_text("utf-8")
        return web.Response(text=text, content_type=STATIC_TYPES[name])

    app.router.add_get("/", index)
    app.router.add_get("/api/sections", sections)
    app.router.add_get("/api/state", state)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/api/dead-letters/retry", retry)
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
        response = await handler(request)
        response.headers.update(SECURITY_HEADERS)
        return response

    return guard


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
    """Runs the application on the configured host and port until stopped."""

    def __init__(self, app: web.Application, settings: DashboardSettings):
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True,  # no token in any log
                                     shutdown_timeout=1.0)
        self._settings = settings
        self.port: int | None = None

    async def start(self) -> str:
        """Binds and serves; returns the address the page is at."""
        await self._runner.setup()
        await web.TCPSite(self._runner, self._settings.host, self._settings.port).start()
        self.port = int(self._runner.addresses[0][1])
        host = f"[{self._settings.host}]" if ":" in self._settings.host else self._settings.host
        return f"http://{host}:{self.port}/"

    async def stop(self) -> None:
        """Stops serving (open requests are cancelled)."""
        await asyncio.wait_for(self._runner.cleanup(), timeout=5)
