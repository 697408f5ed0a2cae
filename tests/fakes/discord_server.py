"""A fake of the Discord REST API and gateway, just enough for discord.py 2.x to log in, chat, edit and upload,
and to show buttons (message components) whose taps arrive as INTERACTION_CREATE and are answered on the
interaction callback endpoint. A guild's roles come with its GUILD_CREATE, and a guild message carries its
author's partial `member` (role ids included), as the gateway sends them: reading roles costs no REST call."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import BodyPartReader, WSMsgType, web

from tests.fakes.base import FakeServer

DISCORD_EPOCH_MS = 1_420_070_400_000
MESSAGE_CONTENT_INTENT = 1 << 15
BOT_ID = "900000000000000001"
APPLICATION_ID = "900000000000000002"
OWNER_ID = "900000000000000003"
REFUSALS = {403: (50007, "Cannot send messages to this user"), 404: (10003, "Unknown Channel")}
UNKNOWN_MESSAGE = (10008, "Unknown Message")


@dataclass
class SentMessage:
    """One message the bot posted: where, what, which files, and what it replied to."""

    id: str
    channel_id: str
    content: str | None
    files: list[tuple[str, bytes]] = field(default_factory=list)
    reply_to: str | None = None
    payload: dict[str, Any] = field(default_factory=dict)

    @property
    def buttons(self) -> list[tuple[str, str]]:
        """(custom_id, label) of each button in the message's components."""
        return [(b["custom_id"], b.get("label", "")) for b in _buttons(self.payload.get("components") or [])]


@dataclass
class EditedMessage:
    """One PATCH of a message the bot posted: which message, in which channel, and its new content."""

    id: str
    channel_id: str
    content: str


MESSAGE_BUCKET = {"X-RateLimit-Limit": "5", "X-RateLimit-Remaining": "4", "X-RateLimit-Reset-After": "0.01",
                  "X-RateLimit-Bucket": "messages"}


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    # discord.py reads a body as JSON only when the content type is exactly `application/json`.
    return web.Response(body=json.dumps(data).encode(), status=status,
                        headers={**(headers or {}), "Content-Type": "application/json"})


def _role(role_id: str, name: str, position: int) -> dict[str, Any]:
    """A role object as GUILD_CREATE lists it (https://discord.com/developers/docs/topics/permissions#role-object)."""
    return {"id": role_id, "name": name, "color": 0, "colors": {"primary_color": 0, "secondary_color": None,
                                                                 "tertiary_color": None},
            "hoist": False, "icon": None, "unicode_emoji": None, "position": position, "permissions": "0",
            "managed": False, "mentionable": False, "flags": 0}


def _buttons(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The buttons (type 2) in a message's action rows (type 1)."""
    return [c for row in rows for c in row.get("components") or [] if c.get("type") == 2]


class DiscordFakeServer(FakeServer):
    """REST under `/api/v10`, the gateway websocket at `/gw`, attachment downloads at `/attachments/…`."""

    def __init__(self, token: str = "fake-discord-token") -> None:
        self.token = token
        self.sent: list[SentMessage] = []
        self.edits: list[EditedMessage] = []
        self.written: list[dict[str, Any]] = []  # the users' messages, as MESSAGE_CREATE carried them (or edited)
        self._next_edit = itertools.count(1)
        self.typing: list[str] = []
        self.identifies: list[dict[str, Any]] = []
        self.resumes = 0
        self.dm_channels: dict[str, str] = {}
        self.closed_dms: set[str] = set()  # users who accept no DMs from the bot (Discord answers 403)
        self.attachments: dict[str, bytes] = {}
        self.rate_limited = 0
        self.failed = 0
        self.refused = 0
        self._connections: dict[web.WebSocketResponse, int] = {}
        self._posted: dict[str, dict[str, Any]] = {}  # message id → the bot's message, while it exists
        self._counter = itertools.count(1)
        self._rate_limits: list[float] = []
        self._refusals: list[int] = []
        self._fail_times = 0
        self._fail_after = 0
        self._fail_status = 503
        self._identify_close: list[int] = []
        self.typing_status = 204
        self.responses: list[tuple[str, dict[str, Any]]] = []  # (interaction id, callback body) of each answer
        self._tapped: dict[str, str] = {}  # interaction id → the id of the message whose button was tapped
        super().__init__()

    # --- knobs the tests turn ----------------------------------------------------------------

    @property
    def api_base_url(self) -> str:
        return f"{self.url}/api/v10"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gw"

    def snowflake(self) -> str:
        """A fresh, realistic Discord id (its timestamp is now)."""
        return str(((int(time.time() * 1000) - DISCORD_EPOCH_MS) << 22) | (next(self._counter) & 0x3FFFFF))

    def rate_limit_next(self, times: int, retry_after: float) -> None:
        """Answers the next `times` message posts with 429 and this retry-after (seconds)."""
        self._rate_limits.extend([retry_after] * times)

    def fail_next(self, times: int, after: int = 0, status: int = 503) -> None:
        """Answers `times` message posts with `status` after letting `after` succeed.

        discord.py retries 500, 502, 504 and 524 by itself (sleeping 1 s, 3 s, …); 503 reaches the caller.
        """
        self._fail_times, self._fail_after, self._fail_status = times, after, status

    def refuse_next(self, status: int = 403) -> None:
        """Answers the next message post with Discord's permanent refusal for `status` (see REFUSALS):
        403 code 50007 "Cannot send messages to this user", 404 code 10003 "Unknown Channel"."""
        if status not in REFUSALS:
            raise ValueError(f"no Discord refusal with HTTP {status}; known: {sorted(REFUSALS)}")
        self._refusals.append(status)

    def delete_sent(self) -> None:
        """Deletes every message the bot posted so far: editing one answers 404 Unknown Message."""
        self._posted.clear()

    def close_on_identify(self, *codes: int) -> None:
        """Closes the next gateway sessions with these close codes instead of answering READY."""
        self._identify_close.extend(codes)

    @property
    def connected(self) -> int:
        """How many gateway sessions are identified (or resumed) and receiving events."""
        return len(self._connections)

    async def wait_connected(self) -> None:
        """Waits (up to 10 s) until at least one gateway session can receive events."""
        deadline = time.monotonic() + 10.0
        while not self._connections:
            if time.monotonic() > deadline:
                raise AssertionError("no discord.py client connected to the fake gateway")
            await asyncio.sleep(0.01)

    async def drop_connections(self, code: int = 4000) -> None:
        """Closes every gateway session from the server side, as a network blip or Discord would."""
        sockets = list(self._connections)
        self._connections.clear()
        for ws in sockets:
            await ws.close(code=code)

    # --- inbound events ------------------------------------------------------------------------

    def user(self, user_id: str, name: str, *, bot: bool = False) -> dict[str, Any]:
        return {"id": user_id, "username": name, "global_name": name, "discriminator": "0",
                "avatar": None, "bot": bot}

    def bot_user(self) -> dict[str, Any]:
        return self.user(BOT_ID, "switchyard-bot", bot=True)

    async def dispatch(self, event: str, data: dict[str, Any]) -> None:
        """Sends one DISPATCH event to every connected session."""
        await self.wait_connected()
        for ws in list(self._connections):
            self._connections[ws] += 1
            await ws.send_str(json.dumps({"op": 0, "t": event, "s": self._connections[ws], "d": data}))

    async def message_create(self, channel_id: str, author: dict[str, Any], content: str, *,
                             files: Sequence[tuple[str, bytes]] = (), guild_id: str | None = None,
                             reply_to: str | None = None, mentions: Sequence[dict[str, Any]] = (),
                             voice: tuple[bytes, float] | None = None, roles: Sequence[str] | None = None) -> str:
        """Delivers a MESSAGE_CREATE as if `author` wrote `content` in `channel_id`; returns its id. `voice`
        (OGG/Opus bytes, seconds) makes it a voice message, as Discord's apps send one; `roles` (with `guild_id`)
        are the role ids of the author's `member` object, which Discord adds to a guild message."""
        message = self._message(channel_id, author, content, files=files, reply_to=reply_to)
        if voice is not None:
            attachment_id = self.snowflake()
            self.attachments[attachment_id] = voice[0]
            url = f"{self.url}/attachments/{channel_id}/{attachment_id}/voice-message.ogg"
            message["attachments"].append({
                "id": attachment_id, "filename": "voice-message.ogg", "size": len(voice[0]), "url": url,
                "proxy_url": url, "content_type": "audio/ogg", "duration_secs": voice[1], "waveform": "AAAA"})
            message["flags"] = 1 << 13  # IS_VOICE_MESSAGE
        message["mentions"] = list(mentions)
        if guild_id is not None:
            message["guild_id"] = guild_id
            if roles is not None:
                message["member"] = {"roles": list(roles), "joined_at": datetime.now(UTC).isoformat(),
                                     "deaf": False, "mute": False, "flags": 0, "premium_since": None, "nick": None}
        self.written.append(message)
        await self.dispatch("MESSAGE_CREATE", message)
        return str(message["id"])

    def edited_last(self, channel_id: str, author_id: str, content: str) -> dict[str, Any]:
        """The author's latest message in `channel_id` edited to `content`, as a MESSAGE_UPDATE carries it (the
        whole message, with `edited_timestamp`); deliver it with `dispatch("MESSAGE_UPDATE", …)`."""
        mine = [m for m in self.written if m["channel_id"] == channel_id and m["author"]["id"] == author_id]
        assert mine, f"{author_id} wrote nothing in {channel_id} to edit"
        stamp = datetime.now(UTC) + timedelta(milliseconds=next(self._next_edit))
        edited = {**mine[-1], "content": content, "edited_timestamp": stamp.isoformat()}
        self.written[self.written.index(mine[-1])] = edited
        return edited

    def interaction(self, channel_id: str, user: dict[str, Any], custom_id: str) -> dict[str, Any]:
        """The INTERACTION_CREATE of `user` tapping the button `custom_id` under the bot's latest message in
        the DM channel `channel_id` showing it, as Discord sends it (its own id and token)."""
        shown = [m for m in self._posted.values() if m["channel_id"] == channel_id
                 and any(b["custom_id"] == custom_id for b in _buttons(m["components"]))]
        assert shown, f"no message of the bot in {channel_id} shows a button {custom_id!r}"
        interaction_id = self.snowflake()
        self._tapped[interaction_id] = shown[-1]["id"]
        return {"id": interaction_id, "application_id": APPLICATION_ID, "type": 3, "version": 1,
                "token": f"itoken-{interaction_id}", "data": {"custom_id": custom_id, "component_type": 2},
                "channel_id": channel_id, "channel": {"id": channel_id, "type": 1, "recipients": [user]},
                "user": user, "message": shown[-1], "locale": "en-US", "app_permissions": "0", "entitlements": [],
                "authorizing_integration_owners": {"1": user["id"]}, "context": 1,
                "attachment_size_limit": 10_485_760}

    async def guild_create(self, guild_id: str, channel_id: str, thread_id: str,
                           roles: dict[str, str] | None = None) -> None:
        """Makes a guild with one text channel and one active thread in it known to the bot, with its @everyone
        role (whose id is the guild's) and `roles` (id -> name)."""
        channel = {"id": channel_id, "type": 0, "name": "general", "position": 0, "guild_id": guild_id,
                   "permission_overwrites": [], "nsfw": False, "parent_id": None}
        thread = {"id": thread_id, "type": 11, "name": "a thread", "guild_id": guild_id,
                  "parent_id": channel_id, "owner_id": "1001", "message_count": 0, "member_count": 1,
                  "thread_metadata": {"archived": False, "auto_archive_duration": 1440, "locked": False,
                                      "archive_timestamp": datetime.now(UTC).isoformat()}}
        await self.dispatch("GUILD_CREATE", {
            "id": guild_id, "name": "guild", "icon": None, "owner_id": OWNER_ID, "unavailable": False,
            "member_count": 2, "large": False, "features": [], "emojis": [], "stickers": [],
            "roles": [_role(guild_id, "@everyone", 0)] + [_role(role_id, name, position) for position, (role_id, name)
                                                          in enumerate((roles or {}).items(), start=1)],
            "members": [], "voice_states": [], "presences": [], "channels": [channel], "threads": [thread],
            "stage_instances": [], "guild_scheduled_events": [], "soundboard_sounds": [],
            "verification_level": 0, "default_message_notifications": 0, "explicit_content_filter": 0,
            "mfa_level": 0, "system_channel_flags": 0, "premium_tier": 0, "nsfw_level": 0,
            "preferred_locale": "en-US", "afk_timeout": 300, "joined_at": datetime.now(UTC).isoformat()})

    def _message(self, channel_id: str, author: dict[str, Any], content: str, *,
                 files: Sequence[tuple[str, bytes]] = (), reply_to: str | None = None) -> dict[str, Any]:
        attachments = []
        for name, data in files:
            attachment_id = self.snowflake()
            self.attachments[attachment_id] = data
            url = f"{self.url}/attachments/{channel_id}/{attachment_id}/{name}"
            attachments.append({"id": attachment_id, "filename": name, "size": len(data), "url": url,
                                "proxy_url": url, "content_type": "application/octet-stream"})
        message: dict[str, Any] = {
            "id": self.snowflake(), "type": 19 if reply_to else 0, "content": content,
            "channel_id": channel_id, "author": author, "attachments": attachments, "embeds": [],
            "mentions": [], "mention_roles": [], "mention_everyone": False, "pinned": False, "tts": False,
            "timestamp": datetime.now(UTC).isoformat(), "edited_timestamp": None, "flags": 0,
            "components": []}
        if reply_to:
            message["message_reference"] = {"message_id": reply_to, "channel_id": channel_id}
        return message

    # --- routes ----------------------------------------------------------------------------------

    def setup_routes(self, app: web.Application) -> None:
        app.router.add_get("/gw", self._gateway)
        app.router.add_get("/api/v10/users/@me", self._me)
        app.router.add_get("/api/v10/oauth2/applications/@me", self._application)
        app.router.add_post("/api/v10/users/@me/channels", self._create_dm)
        app.router.add_post("/api/v10/channels/{channel_id}/messages", self._create_message)
        app.router.add_patch("/api/v10/channels/{channel_id}/messages/{message_id}", self._edit_message)
        app.router.add_post("/api/v10/channels/{channel_id}/typing", self._trigger_typing)
        app.router.add_get("/attachments/{channel_id}/{attachment_id}/{name}", self._attachment)
        app.router.add_post("/api/v10/interactions/{interaction_id}/{token}/callback", self._interaction_callback)

    def _authorized(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bot {self.token}"

    def _unauthorized(self) -> web.Response:
        return _json({"message": "401: Unauthorized", "code": 0}, status=401)

    async def _me(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._unauthorized()
        return _json({**self.bot_user(), "flags": 0, "verified": True, "mfa_enabled": False})

    async def _application(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._unauthorized()
        return _json({"id": APPLICATION_ID, "name": "switchyard", "description": "", "icon": None,
                      "bot_public": True, "bot_require_code_grant": False, "verify_key": "00",
                      "owner": self.user(OWNER_ID, "owner"), "flags": 0, "summary": ""})

    async def _create_dm(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._unauthorized()
        recipient = str((await request.json())["recipient_id"])
        if recipient in self.closed_dms:
            code, wording = REFUSALS[403]
            self.refused += 1
            return _json({"message": wording, "code": code}, status=403)
        channel_id = self.dm_channels.setdefault(recipient, self.snowflake())
        return _json({"id": channel_id, "type": 1, "last_message_id": None,
                      "recipients": [self.user(recipient, f"user{recipient}")]})

    async def _trigger_typing(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._unauthorized()
        if self.typing_status >= 400:
            return _json({"message": "Missing Permissions", "code": 50013}, status=self.typing_status)
        self.typing.append(request.match_info["channel_id"])
        self.changed.set()
        return web.Response(status=204)

    async def _attachment(self, request: web.Request) -> web.Response:
        data = self.attachments.get(request.match_info["attachment_id"])
        if data is None:
            return web.Response(status=404)
        return web.Response(body=data, content_type="application/octet-stream")

    def _gate(self) -> web.Response | None:
        """The 429, refusal or failure a post or edit gets instead of success, when a test asked for one."""
        if self._rate_limits:
            return self._too_many_requests(self._rate_limits.pop(0))
        if self._refusals:
            status = self._refusals.pop(0)
            code, wording = REFUSALS[status]
            self.refused += 1
            return _json({"message": wording, "code": code}, status=status)
        if self._fail_times and self._fail_after <= 0:
            self._fail_times -= 1
            self.failed += 1
            return _json({"message": "Service unavailable", "code": 0}, status=self._fail_status)
        self._fail_after -= 1
        return None

    async def _create_message(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._unauthorized()
        if (refusal := self._gate()) is not None:
            return refusal
        payload, files = await self._read_post(request)
        channel_id = request.match_info["channel_id"]
        reference = payload.get("message_reference") or {}
        reply_to = str(reference["message_id"]) if reference.get("message_id") else None
        message = self._message(channel_id, self.bot_user(), payload.get("content") or "", reply_to=reply_to)
        message["components"] = payload.get("components") or []
        self.sent.append(SentMessage(id=message["id"], channel_id=channel_id, content=payload.get("content"),
                                     files=files, reply_to=reply_to, payload=payload))
        self._posted[message["id"]] = message
        self.changed.set()
        return _json(message, headers=MESSAGE_BUCKET)

    async def _edit_message(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._unauthorized()
        if (refusal := self._gate()) is not None:
            return refusal
        message_id, channel_id = request.match_info["message_id"], request.match_info["channel_id"]
        message = self._posted.get(message_id)
        if message is None or message["channel_id"] != channel_id:
            code, wording = UNKNOWN_MESSAGE
            return _json({"message": wording, "code": code}, status=404)
        payload, _ = await self._read_post(request)
        content = str(payload.get("content") or "")
        message.update(content=content, edited_timestamp=datetime.now(UTC).isoformat())
        if "components" in payload:
            message["components"] = payload["components"] or []
        self.edits.append(EditedMessage(id=message_id, channel_id=channel_id, content=content))
        self.changed.set()
        return _json(message, headers=MESSAGE_BUCKET)

    async def _interaction_callback(self, request: web.Request) -> web.Response:
        """An answer to an interaction (no bot token: the interaction's own token authorises it); type 7
        updates the tapped message, a second answer to one interaction is refused as Discord does."""
        interaction_id = request.match_info["interaction_id"]
        if request.match_info["token"] != f"itoken-{interaction_id}":
            return _json({"message": "Unknown interaction", "code": 10062}, status=404)
        if any(seen == interaction_id for seen, _ in self.responses):
            return _json({"message": "Interaction has already been acknowledged.", "code": 40060}, status=400)
        body, _ = await self._read_post(request)
        self.responses.append((interaction_id, body))
        resource: dict[str, Any] = {"type": body.get("type")}
        data = body.get("data") or {}
        if body.get("type") == 7:
            tapped = self._posted.get(self._tapped.get(interaction_id, ""))
            if tapped is not None:
                tapped.update({k: v for k, v in data.items() if k in ("content", "components")})
                self.edits.append(EditedMessage(id=tapped["id"], channel_id=tapped["channel_id"],
                                                content=str(tapped.get("content", ""))))
                resource["message"] = tapped
        self.changed.set()
        return _json({"interaction": {"id": interaction_id, "type": 3, "response_message_loading": False,
                                      "response_message_ephemeral": bool(data.get("flags", 0) & 64)},
                      "resource": resource})

    def _too_many_requests(self, retry_after: float) -> web.Response:
        self.rate_limited += 1
        # discord.py treats a 429 without a `Via` header as a Cloudflare ban, as the real API sends one.
        headers = {"Retry-After": str(max(1, round(retry_after))), "X-RateLimit-Limit": "5",
                   "X-RateLimit-Remaining": "0", "X-RateLimit-Reset-After": str(retry_after),
                   "X-RateLimit-Bucket": "messages", "X-RateLimit-Scope": "user", "Via": "1.1 google"}
        return _json({"message": "You are being rate limited.", "retry_after": retry_after, "global": False},
                     status=429, headers=headers)

    async def _read_post(self, request: web.Request) -> tuple[dict[str, Any], list[tuple[str, bytes]]]:
        """The JSON body, or the `payload_json` and `files[n]` parts of a multipart upload."""
        if not request.content_type.startswith("multipart/"):
            return await request.json(), []
        payload: dict[str, Any] = {}
        files: list[tuple[str, bytes]] = []
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader):
                continue
            if part.name == "payload_json":
                payload = json.loads(await part.text())
            elif part.name and part.name.startswith("files["):
                files.append((part.filename or "", bytes(await part.read())))
        return payload, files

    # --- gateway ----------------------------------------------------------------------------------

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_str(json.dumps({"op": 10, "d": {"heartbeat_interval": 41250}}))
        try:
            async for frame in ws:
                if frame.type is WSMsgType.TEXT:
                    await self._gateway_op(ws, json.loads(frame.data))
        finally:
            self._connections.pop(ws, None)
        return ws

    async def _gateway_op(self, ws: web.WebSocketResponse, message: dict[str, Any]) -> None:
        op, data = message.get("op"), message.get("d") or {}
        if op == 1:
            await ws.send_str(json.dumps({"op": 11}))
        elif op == 2:
            self.identifies.append(data)
            if data.get("token") != self.token:
                await ws.close(code=4004, message=b"Authentication failed.")
            elif self._identify_close:
                await ws.close(code=self._identify_close.pop(0))
            else:
                await self._ready(ws)
        elif op == 6:
            self.resumes += 1
            self._connections[ws] = int(data.get("seq") or 0) + 1
            await ws.send_str(json.dumps({"op": 0, "t": "RESUMED", "s": self._connections[ws], "d": {}}))
            self.changed.set()

    async def _ready(self, ws: web.WebSocketResponse) -> None:
        ready = {"v": 10, "user": {**self.bot_user(), "flags": 0, "verified": True, "mfa_enabled": False},
                 "guilds": [], "session_id": f"session-{self.snowflake()}",
                 "resume_gateway_url": self.gateway_url, "application": {"id": APPLICATION_ID, "flags": 0}}
        self._connections[ws] = 1
        await ws.send_str(json.dumps({"op": 0, "t": "READY", "s": 1, "d": ready}))
        self.changed.set()
