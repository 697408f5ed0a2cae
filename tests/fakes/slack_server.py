"""A fake Slack: the Web API methods the plugin calls, Socket Mode, signed HTTP events, file up/downloads.

Records what the bot sent (text, files with their bytes, channel, thread, the buttons of its actions
blocks), its edits and reactions, answers `usergroups.list` from the user groups a test names (their members
only with `include_users`, as https://api.slack.com/methods/usergroups.list documents), and injects message
events and button taps (block_actions) either through the Socket Mode WebSocket (waiting for the envelope's
ack) or as signed POSTs to the bot's HTTP events URL (a tap as the form field `payload`, as Slack posts interactions).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import time
import urllib.parse
from types import TracebackType
from typing import Any

import aiohttp
from aiohttp import web

from gateway.testing.conformance import SentItem
from tests.fakes.base import FakeServer

SEND_METHODS = {"chat.postMessage", "chat.postEphemeral", "chat.update", "files.getUploadURLExternal"}
ACK_TIMEOUT_S = 5.0


class FakeSlack(FakeServer):
    """Enough of slack.com/api, the Socket Mode link and files.slack.com for the Slack plugin."""

    def __init__(self, *, bot_token: str = "xoxb-fake-bot-token", app_token: str = "xapp-fake-app-token",
                 signing_secret: str = "fake-signing-secret") -> None:
        self.bot_token = bot_token
        self.app_token = app_token
        self.signing_secret = signing_secret
        self.bot_user_id = "UBOT"
        self.bot_id = "BBOT"
        self.users: dict[str, str] = {}
        self.sent: list[SentItem] = []
        self.ephemeral: list[tuple[str, str, str]] = []  # (channel, the one user who sees it, text)
        self.edits: list[tuple[str, str, str]] = []  # (channel, ts of the edited message, its new text)
        self.posts: list[tuple[str, str, str]] = []  # (ts, channel, text as posted) of each chat.postMessage
        self._live: dict[str, str] = {}  # ts → channel of each posted message not deleted
        self.messages: dict[str, dict[str, Any]] = {}  # ts → the bot's message as Slack keeps it (blocks too)
        self.acks: list[dict[str, Any]] = []  # the Socket Mode acks of interactive envelopes
        self.reactions: list[dict[str, str]] = []
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.events_url: str | None = None
        self.last_http_body = ""
        self.connections = 0
        self._files: dict[str, tuple[str, bytes]] = {}
        self._uploads: dict[str, dict[str, Any]] = {}
        self._sockets: list[web.WebSocketResponse] = []
        self._socket_ready = asyncio.Event()
        self._acks: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._clock = 0.0
        self._rate_limited: list[float] = []
        self._fail_after = 0
        self._fail_times = 0
        self._refusals: list[str] = []
        self.usergroups: list[dict[str, Any]] = []  # as usergroups.list answers them (`users` included)
        self.usergroups_error: str | None = None  # e.g. "missing_scope": usergroups.list answers ok: false
        super().__init__()

    def setup_routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_post("/upload/{file_id}", self._upload)
        app.router.add_get("/files/{file_id}/{name}", self._download)
        app.router.add_get("/link", self._link)

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.drop_connections()
        await super().__aexit__(exc_type, exc, tb)

    # --- what tests control ----------------------------------------------------------------

    def rate_limit_next(self, times: int, retry_after: float) -> None:
        """Answers the next `times` sends with HTTP 429 and this Retry-After."""
        self._rate_limited += [retry_after] * times

    def fail_next(self, times: int, after: int = 0) -> None:
        """Answers `times` sends with HTTP 500 after letting `after` sends succeed."""
        self._fail_after, self._fail_times = after, times

    def refuse_next(self, error: str = "not_in_channel") -> None:
        """Answers the next send as Slack refuses one for good: HTTP 200, `ok: false` and this error."""
        self._refusals.append(error)

    def delete_sent(self) -> None:
        """Deletes every message the bot posted so far: chat.update on one answers message_not_found."""
        self._live.clear()

    def next_ts(self) -> str:
        """A fresh, increasing Slack message ts (seconds with microseconds, as Slack's)."""
        self._clock = max(round(time.time(), 6), round(self._clock + 0.000001, 6))
        return f"{self._clock:.6f}"

    def add_file(self, name: str, data: bytes, mimetype: str = "text/plain") -> dict[str, Any]:
        """Makes a file downloadable (bot token required) and returns its event `files[]` entry."""
        file_id = f"F{next(self._ids):05d}"
        self._files[file_id] = (name, data)
        url = f"{self.url}/files/{file_id}/{name}"
        return {"id": file_id, "name": name, "title": name, "mimetype": mimetype, "size": len(data),
                "url_private": url, "url_private_download": url + "?download=1"}

    def message_event(self, text: str, *, user: str, channel: str, ts: str | None = None,
                      thread_ts: str | None = None, files: list[dict[str, Any]] | None = None,
                      **extra: Any) -> dict[str, Any]:
        """A `message` event as Slack sends it for a channel or DM message."""
        event: dict[str, Any] = {"type": "message", "text": text, "user": user, "channel": channel,
                                 "ts": ts or self.next_ts(), "channel_type": "channel", "team": "T1"}
        if thread_ts:
            event["thread_ts"] = thread_ts
        if files:
            event.update(subtype="file_share", files=files)
        event.update(extra)
        return event

    def message_changed(self, original: dict[str, Any], text: str) -> dict[str, Any]:
        """The `message_changed` event Slack sends when the author edits `original` (a message event) to
        `text`: the message as it is now under `message`, with `edited.ts`; its own ts."""
        inner = {key: value for key, value in original.items() if key not in ("channel", "channel_type")}
        inner.update(text=text, edited={"user": original["user"], "ts": self.next_ts()})
        return {"type": "message", "subtype": "message_changed", "hidden": True, "channel": original["channel"],
                "channel_type": "channel", "ts": self.next_ts(), "event_ts": self.next_ts(), "message": inner,
                "previous_message": {key: value for key, value in inner.items() if key != "edited"}
                | {"text": original["text"]}}

    def callback(self, event: dict[str, Any]) -> dict[str, Any]:
        """The event_callback body wrapping one event."""
        return {"token": "legacy", "team_id": "T1", "api_app_id": "A1", "type": "event_callback",
                "event": event, "event_id": f"Ev{next(self._ids):08d}", "event_time": int(time.time()),
                "authorizations": [{"team_id": "T1", "user_id": self.bot_user_id, "is_bot": True}]}

    async def deliver(self, event: dict[str, Any]) -> None:
        """Sends one event to the bot: over Socket Mode (waits for the ack) or signed over HTTP."""
        body = self.callback(event)
        if self.events_url is None:
            await self.push_envelope(body)
        else:
            status = await self.post_event(json.dumps(body).encode())
            assert status == 200, f"the bot answered the event with HTTP {status}"

    def block_actions(self, action_id: str, *, user: str, channel: str) -> dict[str, Any]:
        """The block_actions payload of `user` tapping the button `action_id` under the bot's latest message
        in `channel` showing it, as Slack sends it (trigger_id unique to this tap)."""
        shown = [(ts, m) for ts, m in self.messages.items() if m["channel"] == channel and _button(m, action_id)]
        assert shown, f"no message of the bot in {channel} shows a button {action_id!r}"
        ts, message = shown[-1]
        button = _button(message, action_id) or {}
        container: dict[str, Any] = {"type": "message", "message_ts": ts, "channel_id": channel, "is_ephemeral": False}
        if message.get("thread_ts"):
            container["thread_ts"] = message["thread_ts"]
        name = self.users.get(user, user)
        return {"type": "block_actions", "user": {"id": user, "username": name.lower(), "name": name.lower(),
                                                  "team_id": "T1"},
                "api_app_id": "A1", "token": "legacy", "container": container,
                "trigger_id": f"{next(self._ids)}.1.{time.time_ns()}", "team": {"id": "T1", "domain": "fake"},
                "enterprise": None, "is_enterprise_install": False, "channel": {"id": channel, "name": "general"},
                "message": {"type": "message", "user": self.bot_user_id, "bot_id": self.bot_id, **message},
                "state": {"values": {}}, "response_url": f"{self.url}/respond/{ts}",
                "actions": [{"action_id": action_id, "block_id": button["block_id"], "text": button["text"],
                             "value": button.get("value"), "type": "button", "action_ts": self.next_ts()}]}

    async def tap(self, payload: dict[str, Any]) -> None:
        """Delivers a block_actions payload: an `interactive` envelope (its ack recorded), or a signed POST."""
        if self.events_url is None:
            self.acks.append(await self.push_envelope(payload, kind="interactive"))
        else:
            body = urllib.parse.urlencode({"payload": json.dumps(payload)}).encode()
            status = await self.post_event(body, content_type="application/x-www-form-urlencoded")
            assert status == 200, f"the bot answered the tap with HTTP {status}"

    async def push_envelope(self, payload: dict[str, Any], *, kind: str = "events_api") -> dict[str, Any]:
        """Sends an envelope (events_api, or interactive for a tap) over the current Socket Mode
        connection; returns the ack."""
        await asyncio.wait_for(self._socket_ready.wait(), ACK_TIMEOUT_S)
        envelope_id = f"env-{next(self._ids)}"
        ack = asyncio.get_running_loop().create_future()
        self._acks[envelope_id] = ack
        await self._sockets[-1].send_json({"envelope_id": envelope_id, "type": kind,
                                           "accepts_response_payload": kind == "interactive", "retry_attempt": 0,
                                           "retry_reason": "", "payload": payload})
        return await asyncio.wait_for(ack, ACK_TIMEOUT_S)

    async def post_event(self, body: bytes, *, secret: str | None = None, timestamp: int | None = None,
                         content_type: str = "application/json") -> int:
        """POSTs a body to the bot's events URL signed with `secret` (default: the right one)."""
        assert self.events_url is not None
        stamp = str(timestamp if timestamp is not None else int(time.time()))
        key = (secret if secret is not None else self.signing_secret).encode()
        signature = "v0=" + hmac.new(key, f"v0:{stamp}:".encode() + body, hashlib.sha256).hexdigest()
        headers = {"Content-Type": content_type, "X-Slack-Request-Timestamp": stamp,
                   "X-Slack-Signature": signature}
        async with aiohttp.ClientSession() as session, session.post(self.events_url, data=body,
                                                                    headers=headers) as response:
            self.last_http_body = await response.text()
            return response.status

    async def drop_connections(self) -> None:
        """Closes every Socket Mode connection from the server side (as Slack does on a refresh)."""
        self._socket_ready.clear()
        for socket in list(self._sockets):
            await socket.close()

    def methods(self) -> list[str]:
        """The Web API methods called so far, in order."""
        return [name for name, _ in self.calls]

    # --- Web API -----------------------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params = await _params(request)
        self.calls.append((method, params))
        token = params.get("token") or request.headers.get("Authorization", "").removeprefix("Bearer ")
        wanted = self.app_token if method == "apps.connections.open" else self.bot_token
        if token != wanted:
            return _ok_false("invalid_auth")
        if method in SEND_METHODS and (refusal := self._gate()) is not None:
            return refusal
        handler = getattr(self, "_m_" + method.replace(".", "_"), None)
        if handler is None:
            return _ok_false("unknown_method")
        result: dict[str, Any] | web.Response = handler(params)
        return result if isinstance(result, web.Response) else web.json_response({"ok": True, **result})

    def _gate(self) -> web.Response | None:
        """The 429, 500 or refusal a send gets instead of success, when the test asked for one."""
        if self._refusals:
            return _ok_false(self._refusals.pop(0))
        if self._rate_limited:
            retry_after = self._rate_limited.pop(0)
            return web.json_response({"ok": False, "error": "ratelimited"}, status=429,
                                     headers={"Retry-After": f"{retry_after:g}"})
        if self._fail_times:
            if self._fail_after:
                self._fail_after -= 1
            else:
                self._fail_times -= 1
                return web.json_response({"ok": False, "error": "fatal_error"}, status=500)
        return None

    def _m_auth_test(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"url": "https://fake.slack.com/", "team": "Fake", "user": "switchyard", "team_id": "T1",
                "user_id": self.bot_user_id, "bot_id": self.bot_id}

    def _m_apps_connections_open(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"url": self.url.replace("http://", "ws://") + "/link"}

    def add_usergroup(self, group_id: str, handle: str, users: list[str]) -> None:
        """A user group of the workspace with these members, with the fields usergroups.list gives one."""
        self.usergroups.append({
            "id": group_id, "team_id": "T1", "is_usergroup": True, "is_subteam": True, "name": handle.title(),
            "description": "", "handle": handle, "is_external": False, "date_create": 1_700_000_000,
            "date_update": 1_700_000_000, "date_delete": 0, "auto_type": None, "auto_provision": False,
            "enterprise_subteam_id": "", "created_by": "U0ADMIN", "updated_by": "U0ADMIN", "deleted_by": None,
            "prefs": {"channels": [], "groups": []}, "users": list(users), "user_count": len(users),
            "channel_count": 0})

    def _m_usergroups_list(self, params: dict[str, Any]) -> dict[str, Any] | web.Response:
        if self.usergroups_error is not None:
            return _ok_false(self.usergroups_error)
        with_users = str(params.get("include_users", "")).lower() in ("1", "true")
        return {"usergroups": [group if with_users else {k: v for k, v in group.items() if k != "users"}
                               for group in self.usergroups]}

    def _m_users_info(self, params: dict[str, Any]) -> dict[str, Any]:
        user = str(params.get("user"))
        name = self.users.get(user, user)
        return {"user": {"id": user, "name": name.lower(), "real_name": name,
                         "profile": {"display_name": name, "real_name": name}}}

    def _m_chat_postMessage(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, ts = str(params["channel"]), self.next_ts()
        blocks = _blocks(params)
        self.sent.append(SentItem(conversation=channel, text=params.get("text"), reply_to=params.get("thread_ts"),
                                  buttons=[(b["action_id"], b["text"]["text"]) for b in _buttons(blocks)]))
        self.posts.append((ts, channel, str(params.get("text"))))
        self._live[ts] = channel
        self.messages[ts] = {"channel": channel, "ts": ts, "text": params.get("text"), "blocks": blocks,
                             **({"thread_ts": params["thread_ts"]} if params.get("thread_ts") else {})}
        self.changed.set()
        return {"channel": channel, "ts": ts, "message": {"text": params.get("text"), "ts": ts}}

    def _m_chat_update(self, params: dict[str, Any]) -> dict[str, Any] | web.Response:
        channel, ts, text = str(params["channel"]), str(params["ts"]), str(params.get("text"))
        if self._live.get(ts) != channel:
            return _ok_false("message_not_found")
        self.edits.append((channel, ts, text))
        if ts in self.messages:
            self.messages[ts].update(text=text, blocks=_blocks(params))
        self.changed.set()
        return {"channel": channel, "ts": ts, "text": text}

    def _m_chat_postEphemeral(self, params: dict[str, Any]) -> dict[str, Any]:
        self.ephemeral.append((str(params["channel"]), str(params["user"]), str(params.get("text"))))
        self.changed.set()
        return {"message_ts": self.next_ts()}

    def _m_files_getUploadURLExternal(self, params: dict[str, Any]) -> dict[str, Any]:
        file_id = f"F{next(self._ids):05d}"
        self._uploads[file_id] = {"filename": params.get("filename"), "length": int(params.get("length", 0))}
        return {"file_id": file_id, "upload_url": f"{self.url}/upload/{file_id}"}

    def _m_files_completeUploadExternal(self, params: dict[str, Any]) -> dict[str, Any]:
        files = json.loads(params["files"])
        for entry in files:
            upload = self._uploads[entry["id"]]
            self.sent.append(SentItem(conversation=str(params.get("channel_id")), filename=upload["filename"],
                                      data=upload.get("data"), reply_to=params.get("thread_ts")))
        self.changed.set()
        return {"files": [{"id": f["id"], "title": f.get("title")} for f in files]}

    def _m_reactions_add(self, params: dict[str, Any]) -> dict[str, Any]:
        self.reactions.append({"action": "add", "channel": params["channel"], "timestamp": params["timestamp"],
                               "name": params["name"]})
        return {}

    def _m_reactions_remove(self, params: dict[str, Any]) -> dict[str, Any]:
        self.reactions.append({"action": "remove", "channel": params["channel"],
                               "timestamp": params["timestamp"], "name": params["name"]})
        return {}

    # --- files and Socket Mode ---------------------------------------------------------------

    async def _upload(self, request: web.Request) -> web.Response:
        upload = self._uploads.get(request.match_info["file_id"])
        if upload is None:
            return web.Response(status=404, text="no such upload")
        upload["data"] = await request.read()
        return web.Response(text=f"OK - {len(upload['data'])}", content_type="text/plain")

    async def _download(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {self.bot_token}":
            return web.Response(text="<html>sign in</html>", content_type="text/html")  # as Slack does
        name, data = self._files[request.match_info["file_id"]]
        return web.Response(body=data, content_type="application/octet-stream")

    async def _link(self, request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse(autoping=True)
        await socket.prepare(request)
        self.connections += 1
        self._sockets.append(socket)
        await socket.send_json({"type": "hello", "num_connections": 1,
                                "connection_info": {"app_id": "A1"}, "debug_info": {"host": "fake"}})
        self._socket_ready.set()
        try:
            async for frame in socket:
                if frame.type == aiohttp.WSMsgType.TEXT:
                    data = json.loads(frame.data)
                    ack = self._acks.pop(str(data.get("envelope_id")), None)
                    if ack is not None and not ack.done():
                        ack.set_result(data)
        finally:
            self._sockets.remove(socket)
            if not self._sockets:
                self._socket_ready.clear()
        return socket


def _blocks(params: dict[str, Any]) -> list[dict[str, Any]]:
    """A call's blocks (a JSON list, or a JSON string of one in a form body)."""
    blocks = params.get("blocks") or []
    return list(json.loads(blocks) if isinstance(blocks, str) else blocks)


def _buttons(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The buttons of a message's actions blocks, each with its block_id."""
    return [{**element, "block_id": block.get("block_id", "")} for block in blocks if block.get("type") == "actions"
            for element in block.get("elements") or [] if element.get("type") == "button"]


def _button(message: dict[str, Any], action_id: str) -> dict[str, Any] | None:
    return next((b for b in _buttons(message.get("blocks") or []) if b["action_id"] == action_id), None)


async def _params(request: web.Request) -> dict[str, Any]:
    """Query string, form body and JSON body merged (slack_sdk uses each, depending on the method)."""
    params: dict[str, Any] = dict(request.query)
    if request.content_type == "application/json":
        params.update(await request.json())
    elif request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
        params.update({k: v for k, v in (await request.post()).items() if isinstance(v, str)})
    return params


def _ok_false(error: str) -> web.Response:
    return web.json_response({"ok": False, "error": error})
