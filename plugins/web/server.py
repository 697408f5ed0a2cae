"""The web chat's HTTP side (aiohttp): the page and its files, the login link, the JSON actions and the WebSocket
each tab reads its conversation from. Every request but the login needs a session cookie; every request that
changes something (POST, the WebSocket handshake) must come from this server's own page (Origin) and POSTs
must carry the page's own header, which no cross-site form can set."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from importlib import resources
from typing import Any, Protocol

from aiohttp import WSMsgType, web

from gateway.channelkit.web import Handler, refused, same_origin, secure, static_file
from plugins.web.logins import COOKIE, SESSION_TTL_S, Logins
from plugins.web.transcript import ROOM, Entry, Transcript, is_conversation, owner_of

log = logging.getLogger("switchyard.web")

STATIC = {"chat.js": "text/javascript", "chat.css": "text/css"}
PAGE_HEADER = "X-Switchyard-Chat"  # set by chat.js on every POST: a cross-site form cannot send it
MAX_JSON_BYTES = 64 * 1024
BODY_TIMEOUT_S = 30.0
MAX_CONVERSATIONS = 1000  # a user's; each is a file in the home
USER_KEY = web.RequestKey("user", str)
SIGNED_OUT = "signed out: open a new chat link to sign in again (`switchyard web link`)"
SIGNED_OUT_CODE = 4001  # the WebSocket close code of a tab whose session ended
TOO_MANY_TABS = 4008  # the WebSocket close code of a tab over `max_tabs_per_user` (4000-4999: the app's own)


class Refusal(Exception):
    """An action the channel will not take: `status` and the words the page shows."""

    def __init__(self, status: int, text: str):
        super().__init__(text)
        self.status = status


class Tabs:
    """The open WebSockets of one web profile, each with its user and session: counted against
    `max_tabs_per_user`, and closed at once when their session ends (Sign out, `switchyard web revoke`)."""

    def __init__(self) -> None:
        self._open: dict[web.WebSocketResponse, tuple[str, str]] = {}

    def count(self, user: str) -> int:
        return sum(owner == user for owner, _ in self._open.values())

    def add(self, ws: web.WebSocketResponse, user: str, session: str) -> None:
        self._open[ws] = (user, session)

    def discard(self, ws: web.WebSocketResponse) -> None:
        self._open.pop(ws, None)

    async def close_signed_out(self, signed_in: Callable[[str], bool]) -> int:
        """Closes the tabs whose session `signed_in` no longer holds (the page says so); returns how many."""
        ended = [ws for ws, (_, session) in self._open.items() if not signed_in(session)]
        for ws in ended:
            self._open.pop(ws, None)
            with contextlib.suppress(ConnectionError, RuntimeError):
                await ws.send_json({"kind": "signed_out", "text": SIGNED_OUT})
            await ws.close(code=SIGNED_OUT_CODE, message=b"signed out")
        return len(ended)

    async def close_all(self) -> None:
        for ws in list(self._open):
            await ws.close(code=1001, message=b"the gateway is stopping")


class Chat(Protocol):
    """What the server asks of the channel."""

    transcript: Transcript
    room: bool
    dashboard_url: str | None
    max_upload_bytes: int
    max_tabs_per_user: int
    tabs: Tabs

    async def say(self, user: str, conversation: str, text: str, client_id: str) -> Entry: ...
    async def tap(self, user: str, conversation: str, ref: str, button: str) -> Entry: ...
    async def upload(self, user: str, conversation: str, name: str, data: bytes, mime: str,
                     seconds: float | None, client_id: str, caption: str) -> Entry: ...
    async def file_of(self, conversation: str, ref: str) -> tuple[str, bytes] | None: ...


def may_read(user: str, conversation: str, room: bool) -> bool:
    """A user reads their own conversations, and the room when the profile has one."""
    return owner_of(conversation) == user or (room and conversation == ROOM)


def build_app(chat: Chat, logins: Logins, *, max_upload_bytes: int) -> web.Application:
    """The aiohttp application of one web profile."""
    routes = Routes(chat, logins, max_upload_bytes)
    app = web.Application(middlewares=[_guard(logins)], client_max_size=max_upload_bytes + 64 * 1024)
    app.on_response_prepare.append(secure)  # gateway.channelkit.web: the dashboard's headers
    app.on_shutdown.append(routes.close_sockets)
    app.router.add_get("/", routes.index)
    app.router.add_get("/static/{name}", routes.static)
    app.router.add_get("/api/me", routes.me)
    app.router.add_post("/api/conversations", routes.new_conversation)
    app.router.add_post("/api/send", routes.say)
    app.router.add_post("/api/logout", routes.sign_out)
    app.router.add_post("/api/tap", routes.tap)
    app.router.add_post("/api/upload", routes.upload)
    app.router.add_get("/files/{conversation}/{ref}", routes.download)
    app.router.add_get("/ws", routes.live)
    return app


class Routes:
    """The handlers of one web profile's routes, over its channel (`chat`) and its logins."""

    def __init__(self, chat: Chat, logins: Logins, max_upload_bytes: int):
        self.chat = chat
        self.tabs = chat.tabs
        self.logins = logins
        self.max_upload_bytes = max_upload_bytes

    async def close_sockets(self, _app: web.Application) -> None:
        await self.tabs.close_all()

    async def index(self, request: web.Request) -> web.Response:
        text = resources.files("plugins.web").joinpath("static/chat.html").read_text("utf-8")
        return web.Response(text=text, content_type="text/html")

    async def static(self, request: web.Request) -> web.Response:
        return static_file("plugins.web", request.match_info["name"], STATIC)

    async def me(self, request: web.Request) -> web.Response:
        user = request[USER_KEY]
        conversations = self.chat.transcript.conversations_of(user) or [self.chat.transcript.new_conversation(user)]
        listed = [{"id": c, "title": self.chat.transcript.title(c)} for c in conversations]
        if self.chat.room:
            listed.insert(0, {"id": ROOM, "title": "room (shared)"})
        return web.json_response({"user": user, "conversations": listed, "dashboard": self.chat.dashboard_url,
                                  "maxUploadBytes": self.chat.max_upload_bytes})

    async def new_conversation(self, request: web.Request) -> web.Response:
        user = request[USER_KEY]
        if len(self.chat.transcript.conversations_of(user)) >= MAX_CONVERSATIONS:
            return web.json_response({"error": f"at most {MAX_CONVERSATIONS} conversations a user"}, status=409)
        return web.json_response({"id": self.chat.transcript.new_conversation(user)})

    async def say(self, request: web.Request) -> web.Response:
        body = await _json(request)
        conversation = _readable(request, str(body.get("conversation", "")), self.chat.room)
        text, client_id = str(body.get("text", "")), str(body.get("id", ""))
        if not text.strip():
            return web.json_response({"error": "an empty message"}, status=400)
        return web.json_response(await _acting(self.chat.say(request[USER_KEY], conversation, text, client_id)))

    async def tap(self, request: web.Request) -> web.Response:
        body = await _json(request)
        conversation = _readable(request, str(body.get("conversation", "")), self.chat.room)
        action = self.chat.tap(request[USER_KEY], conversation, str(body.get("ref", "")), str(body.get("button", "")))
        return web.json_response(await _acting(action))

    async def upload(self, request: web.Request) -> web.Response:
        conversation = _readable(request, request.query.get("c", ""), self.chat.room)
        try:
            async with asyncio.timeout(BODY_TIMEOUT_S):
                form = await request.post()
        except TimeoutError:
            return web.json_response({"error": "the file did not arrive in time"}, status=408)
        except web.HTTPRequestEntityTooLarge:
            return web.json_response({"error": f"a file may have at most {self.max_upload_bytes} bytes"}, status=413)
        field = form.get("file")
        if not isinstance(field, web.FileField):
            return web.json_response({"error": "send the file as the form field `file`"}, status=400)
        data = field.file.read(self.max_upload_bytes + 1)
        if len(data) > self.max_upload_bytes:
            return web.json_response({"error": f"a file may have at most {self.max_upload_bytes} bytes"}, status=413)
        seconds = _number(form.get("seconds"))
        action = self.chat.upload(request[USER_KEY], conversation, field.filename or "file", data,
                             field.content_type or "application/octet-stream", seconds, str(form.get("id", "")),
                             str(form.get("text", ""))[:MAX_JSON_BYTES])
        return web.json_response(await _acting(action))

    async def download(self, request: web.Request) -> web.StreamResponse:
        conversation = _readable(request, request.match_info["conversation"], self.chat.room)
        found = await self.chat.file_of(conversation, request.match_info["ref"])
        if found is None:
            raise web.HTTPNotFound()
        name, data = found
        response = web.Response(body=data, content_type="application/octet-stream")
        response.headers["Content-Disposition"] = f"attachment; filename*=UTF-8''{_quoted(name)}"
        return response

    async def live(self, request: web.Request) -> web.StreamResponse:
        """The conversation's entries after `after`, then each new one as it is appended."""
        conversation = _readable(request, request.query.get("c", ""), self.chat.room)
        after = int(_number(request.query.get("after")) or 0)
        user = request[USER_KEY]
        ws = web.WebSocketResponse(heartbeat=20.0, max_msg_size=4096)
        await ws.prepare(request)
        if self.tabs.count(user) >= self.chat.max_tabs_per_user:
            # said over the socket: a browser shows a page nothing of a refused handshake but its failure
            await ws.send_json({"kind": "refused", "text": f"refused: {user} has as many tabs of this chat open "
                                                            f"as one person may ({self.chat.max_tabs_per_user}); "
                                                            "close one and reload"})
            await ws.close(code=TOO_MANY_TABS, message=b"too many tabs")
            return ws
        self.tabs.add(ws, user, request.cookies.get(COOKIE, ""))
        updates = self.chat.transcript.watch(conversation)  # before the replay: nothing falls between the two
        try:
            last = after
            for entry in self.chat.transcript.entries(conversation, after):
                await ws.send_json(shown(entry))
                last = entry["seq"]
            await ws.send_json({"kind": "synced", "seq": last})
            forward = asyncio.create_task(_forward(ws, updates, last), name=f"web:ws:{conversation}")
            try:
                async for message in ws:
                    if message.type == WSMsgType.ERROR:
                        break
            finally:
                forward.cancel()
                await asyncio.gather(forward, return_exceptions=True)
        finally:
            self.chat.transcript.unwatch(conversation, updates)
            self.tabs.discard(ws)
        return ws

    async def sign_out(self, request: web.Request) -> web.Response:
        """Ends the cookie's session here (a POST: same origin and the page's header, as every change)."""
        self.logins.end_session(request.cookies.get(COOKIE, ""))
        await self.tabs.close_signed_out(lambda session: self.logins.user_of(session) is not None)
        response = web.json_response({"signedOut": True})
        response.del_cookie(COOKIE, path="/")
        return response


async def _forward(ws: web.WebSocketResponse, updates: asyncio.Queue[Entry], last: int) -> None:
    while True:
        entry = await updates.get()
        if "seq" not in entry:  # a signal (typing): shown now, never logged
            with contextlib.suppress(ConnectionError):
                await ws.send_json(entry)
        elif entry["seq"] > last:
            last = entry["seq"]
            with contextlib.suppress(ConnectionError):
                await ws.send_json(shown(entry))


def shown(entry: Entry) -> Entry:
    """What a page gets of a log entry: not the delivery key, nor where a file lies on the gateway's disk
    (the page downloads it by the entry's seq)."""
    public = {key: value for key, value in entry.items() if key != "key"}
    if isinstance(public.get("file"), dict):
        public["file"] = {key: value for key, value in public["file"].items() if key != "path"}
    return public


def _guard(logins: Logins) -> Any:
    """The session check (a login link `?t=` becomes the session cookie and leaves the address bar) and, for
    POSTs and WebSockets, the same-origin check and the page's header."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method == "GET" and request.path == "/" and "t" in request.query:
            user = logins.redeem(request.query["t"])
            if user is None:
                return refused(401, "this login link was used already, has expired or is not ours: "
                                    "ask for a new one (`switchyard web link`)")
            redirect = web.HTTPSeeOther("/")
            redirect.set_cookie(COOKIE, logins.open_session(user), httponly=True, samesite="Strict", path="/",
                                max_age=int(SESSION_TTL_S), secure=request.secure or None)  # HTTPS: Secure
            raise redirect
        user = logins.user_of(request.cookies.get(COOKIE))
        if user is None:
            return refused(401, "not signed in: open the chat link `switchyard run` printed, or ask for one "
                                "with `switchyard web link`")
        websocket = request.headers.get("Upgrade", "").lower() == "websocket"
        if (request.method != "GET" or websocket) and not same_origin(request):
            return refused(403, "refused: this request did not come from the chat page")
        if request.method == "POST" and request.headers.get(PAGE_HEADER) != "1":
            return refused(403, f"refused: a POST without the page's {PAGE_HEADER} header")
        request[USER_KEY] = user
        try:
            return await handler(request)
        except Refusal as exc:
            return web.json_response({"error": str(exc)}, status=exc.status)

    return guard


def _readable(request: web.Request, conversation: str, room: bool) -> str:
    """The conversation, when the request's user may read it (else a 404: another user's is not shown to exist)."""
    if not is_conversation(conversation) or not may_read(request[USER_KEY], conversation, room):
        raise Refusal(404, "no such conversation")
    return conversation


async def _acting(action: Any) -> Entry:
    return shown(await action)


async def _json(request: web.Request) -> dict[str, Any]:
    if request.content_type != "application/json":
        raise Refusal(415, "send a JSON body")
    try:
        async with asyncio.timeout(BODY_TIMEOUT_S):
            raw = await request.content.read(MAX_JSON_BYTES + 1)
        if len(raw) > MAX_JSON_BYTES:
            raise Refusal(413, "a message may have at most 64 KiB")
        body = json.loads(raw)
    except TimeoutError:
        raise Refusal(408, "the body did not arrive in time") from None
    except ValueError:
        raise Refusal(400, "not JSON") from None
    if not isinstance(body, dict):
        raise Refusal(400, "expected a JSON object")
    return body


def _number(value: object) -> float | None:
    try:
        return float(str(value)) if value not in (None, "") else None
    except ValueError:
        return None


def _quoted(name: str) -> str:
    from urllib.parse import quote

    return quote(name, safe="")
