"""The dashboard's HTTP server (aiohttp): the page, its JSON state, its plots, `/metrics`, the retry button,
and allow / deny of a pending tool approval."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from gateway.channelkit.web import HEADER_TIMEOUT_S, Handler, Listener, refused, secure, static_file
from gateway.dashboard import page
from gateway.settings import DashboardSettings, is_loopback

log = logging.getLogger("switchyard.dashboard")

COOKIE = "switchyard_dashboard"
STATIC_TYPES = {"dashboard.js": "text/javascript", "dashboard.css": "text/css"}
MAX_CONNECTIONS = 64  # a page, a few tabs and a Prometheus scraper need a handful
BODY_TIMEOUT_S = 10.0  # to send a request's body
MAX_BODY_BYTES = 64 * 1024


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
    routes = Routes(source, refresh_ms=int(settings.refresh_sec * 1000), body_timeout_s=body_timeout_s)
    app = web.Application(middlewares=[_guard(settings, token)], client_max_size=MAX_BODY_BYTES)
    app.on_response_prepare.append(secure)  # gateway.channelkit.web
    app.router.add_get("/", routes.index)
    app.router.add_get("/api/sections", routes.sections)
    app.router.add_get("/api/glance", routes.glance)
    app.router.add_get("/api/state", routes.state)
    app.router.add_get("/metrics", routes.metrics)
    app.router.add_post("/api/dead-letters/retry", routes.retry)
    app.router.add_post("/api/approvals/answer", routes.answer)
    app.router.add_get("/static/{name}", routes.static)
    return app


class Routes:
    """The dashboard's handlers, over what it shows (`source`)."""

    def __init__(self, source: Source, *, refresh_ms: int, body_timeout_s: float):
        self.source = source
        self.refresh_ms = refresh_ms
        self.body_timeout_s = body_timeout_s

    async def index(self, request: web.Request) -> web.Response:  # the plots take a while to draw: off the loop
        html = await asyncio.to_thread(page.page, await self.source.state(), refresh_ms=self.refresh_ms)
        return web.Response(text=self.source.redact(html), content_type="text/html")

    async def sections(self, request: web.Request) -> web.Response:
        html = page.sections(await self.source.state())
        return web.Response(text=self.source.redact(html), content_type="text/html")

    async def glance(self, request: web.Request) -> web.Response:
        html = await asyncio.to_thread(page.glance, await self.source.glance())
        return web.Response(text=self.source.redact(html), content_type="text/html")

    async def state(self, request: web.Request) -> web.Response:
        text = json.dumps(await self.source.state(), default=str, ensure_ascii=False)
        return web.Response(text=self.source.redact(text), content_type="application/json")

    async def metrics(self, request: web.Request) -> web.Response:
        response = web.Response(body=await self.source.metrics())
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    async def retry(self, request: web.Request) -> web.Response:
        body = await self._body(request, 'expected {"names": [...]}', ("names",))
        if isinstance(body, web.Response):
            return body
        if not isinstance(body["names"], list):
            return web.json_response({"error": 'expected {"names": [...]}'}, status=400)
        try:
            retried = await self.source.retry([str(name) for name in body["names"]])
        except KeyError as exc:
            return web.json_response({"error": self.source.redact(f"not a dead letter: {exc.args[0]}")}, status=404)
        return web.json_response({"retried": retried})

    async def answer(self, request: web.Request) -> web.Response:
        body = await self._body(request, 'expected {"id": ..., "verdict": "allow" or "deny"}', ("id", "verdict"))
        if isinstance(body, web.Response):
            return body
        approval_id, verdict = str(body["id"]), str(body["verdict"])
        if verdict not in ("allow", "deny"):
            return web.json_response({"error": 'verdict: "allow" or "deny"'}, status=400)
        try:
            result = await self.source.answer(approval_id, verdict)
        except KeyError:
            return web.json_response({"error": self.source.redact(f"no approval {approval_id}")}, status=404)
        except ValueError as exc:
            return web.json_response({"error": self.source.redact(str(exc))}, status=400)
        return web.json_response(result, status=200 if result["won"] else 409)

    async def static(self, request: web.Request) -> web.Response:
        return static_file("gateway.dashboard", request.match_info["name"], STATIC_TYPES)

    async def _body(self, request: web.Request, expected: str,
                    fields: tuple[str, ...]) -> dict[str, Any] | web.Response:
        """The request's JSON object holding `fields`, or the refusal to answer with (a cross-site form cannot
        send JSON; a body that does not arrive in time is not waited for)."""
        if request.content_type != "application/json":
            return web.json_response({"error": "send a JSON body"}, status=415)
        try:
            async with asyncio.timeout(self.body_timeout_s):
                body = await request.json()
        except TimeoutError:
            return web.json_response({"error": "the body did not arrive in time"}, status=408)
        except ValueError:
            return web.json_response({"error": expected}, status=400)
        if not isinstance(body, dict) or any(field not in body for field in fields):
            return web.json_response({"error": expected}, status=400)
        return body


def _guard(settings: DashboardSettings, token: str | None) -> Any:
    """Checks the token (Bearer header, cookie, or `?token=` which sets the cookie), or without a token
    that the request is addressed to this machine (a page elsewhere cannot rebind a name to us)."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if token is None:
            host = (request.url.host or "").strip("[]")
            if not (is_loopback(host) or host == settings.host):
                return refused(403, "this dashboard answers only to a loopback address")
        else:
            offered = _offered_token(request)
            if offered is None or not hmac.compare_digest(offered.encode(), token.encode()):
                return refused(401, "unauthorized: send the dashboard token as `Authorization: Bearer …`")
            if "token" in request.query and request.method == "GET":
                clean = request.rel_url.with_query({k: v for k, v in request.query.items() if k != "token"})
                redirect = web.HTTPSeeOther(str(clean))  # the token leaves the address bar and history
                redirect.set_cookie(COOKIE, token, httponly=True, samesite="Strict", path="/")
                raise redirect
        return await handler(request)

    return guard


def _offered_token(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    if header.startswith("Bearer "):
        return header.removeprefix("Bearer ").strip()
    if "token" in request.query:
        return request.query["token"]
    return request.cookies.get(COOKIE)


class Server(Listener):
    """Runs the dashboard on the configured host and port until stopped (gateway.channelkit.web.Listener: a
    connection cap, a deadline for each request's head, malformed requests logged one line a minute)."""

    def __init__(self, app: web.Application, settings: DashboardSettings, *,
                 max_connections: int = MAX_CONNECTIONS, header_timeout_s: float = HEADER_TIMEOUT_S):
        super().__init__(app, settings.host, settings.port or 0, max_connections=max_connections,
                         header_timeout_s=header_timeout_s, log=log, what="dashboard")
