"""A fake Telegram Bot API: just enough for python-telegram-bot to poll, receive webhooks and send.

Endpoints `POST /bot{token}/{method}` (form or multipart, values as strings) for getMe,
deleteWebhook, setWebhook, getUpdates (long poll), sendMessage (with an inline keyboard), sendDocument,
sendPhoto, sendAudio, sendVoice and sendVideo (each with its caption; recorded with the method, answered with
the Message the Bot API documents: `document`, `photo` (an array of PhotoSize), `audio`, `voice`, `video`;
a photo the API cannot take answers 400 `PHOTO_INVALID_DIMENSIONS`, see `refuse_photos`; an upload over 50 MB
413 Request Entity Too Large),
editMessageText, editMessageReplyMarkup, answerCallbackQuery, sendChatAction, getFile and
getChatAdministrators (the administrators a test names per chat, as ChatMemberOwner/ChatMemberAdministrator
objects with every field the Bot API always sends; a private chat answers 400 as the real API does), plus
`GET /file/bot{token}/{path}` for downloads; taps on inline keyboards arrive as callback_query updates.
While a webhook is set, updates are POSTed to it (with the secret-token header) and getUpdates answers
409, as the real API does; so does a getUpdates while another one is still waiting (a second poller of
the same bot), counted in `conflicts`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import mimetypes
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from tests.fakes.base import FakeServer

TOKEN = "424242:FAKE-bot-token-never-real"
BOT_ID = 424242
BOT_USER = {"id": BOT_ID, "is_bot": True, "first_name": "Switchyard", "username": "switchyard_test_bot",
            "can_join_groups": True, "can_read_all_group_messages": False, "supports_inline_queries": False}
MEDIA_METHODS = {"sendDocument": "document", "sendPhoto": "photo", "sendAudio": "audio", "sendVoice": "voice",
                 "sendVideo": "video"}  # the method, and the field of its upload and of the Message answered
SEND_METHODS = ("sendMessage", *MEDIA_METHODS, "editMessageText")  # the calls rate limits and failures hit
UPLOAD_LIMIT = 50 * 1024 * 1024  # "Bots can currently send files of any type of up to 50 MB in size"
NOT_FOUND = "Bad Request: message to edit not found"
NOT_MODIFIED = ("Bad Request: message is not modified: specified new message content and reply markup are "
                "exactly the same as a current content and reply markup of the message")


@dataclass
class Sent:
    """One message the bot sent: its chat, text or file, and where it was threaded."""

    chat: str
    message_id: int
    text: str | None = None
    filename: str | None = None
    data: bytes | None = None
    reply_to: int | None = None
    topic: int | None = None
    buttons: list[tuple[str, str]] = field(default_factory=list)  # (callback_data, text) of its inline keyboard
    method: str = "sendMessage"
    caption: str | None = None


@dataclass
class Edit:
    """One editMessageText that changed a message: the chat, the message and its new text (and whether
    it still has an inline keyboard)."""

    chat: str
    message_id: int
    text: str
    keyboard: bool = False


class FakeTelegram(FakeServer):
    """Records what the bot sends and feeds it updates; can rate-limit, fail and drop polls."""

    def __init__(self, token: str = TOKEN) -> None:
        self.token = token
        self.sent: list[Sent] = []
        self.edits: list[Edit] = []
        self.actions: list[tuple[str, str, int | None]] = []  # (chat, action, topic)
        self.answered: list[tuple[str, str]] = []  # (callback_query_id, text) of each answerCallbackQuery
        self.allowed_updates: list[str] = []  # as the bot last asked (getUpdates, setWebhook); empty: all kinds
        self.calls: list[str] = []
        self.webhook: dict[str, str] | None = None
        self.webhook_statuses: list[int] = []
        self.files: dict[str, tuple[str, bytes]] = {}
        self.migrated: dict[str, int] = {}
        self.fail_polls = 0
        self.fail_actions = 0
        self._messages: dict[tuple[str, int], dict[str, Any]] = {}
        self._next_message: dict[str, itertools.count[int]] = defaultdict(lambda: itertools.count(1))
        self._next_update = itertools.count(1)
        self._next_file = itertools.count(1)
        self._next_query = itertools.count(4_000_000_000_000_000_001)
        self._next_edit = itertools.count(1)
        self._pending: list[dict[str, Any]] = []
        self._arrived = asyncio.Condition()
        self._rate_limited = 0
        self._retry_after = 0.0
        self._fail_after = 0
        self._fail_times = 0
        self._refuse: tuple[int, str] | None = None
        self.polling = 0  # getUpdates calls waiting now
        self.conflicts = 0  # getUpdates refused because another one was waiting (two pollers)
        self.poll_times: list[float] = []  # time.monotonic() of each getUpdates accepted
        self._hold_after: int | None = None
        self.release_held = asyncio.Event()
        self.held = 0  # sends waiting on release_held now
        self.administrators: dict[str, dict[int, str]] = {}  # chat -> user id -> "creator" | "administrator"
        self.fail_admins = 0  # getChatAdministrators calls answered with HTTP 500
        self.hang_admins = asyncio.Event()  # while set, getChatAdministrators never answers (a stalled API)
        self.photos_refused = 0  # the next sendPhoto calls answered 400 PHOTO_INVALID_DIMENSIONS
        super().__init__()

    def setup_routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/bot{token}/{method}", self._api)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)

    # --- test controls ------------------------------------------------------------------------

    def rate_limit_next(self, times: int, retry_after: float) -> None:
        """Answers the next `times` sends with 429 and this retry_after."""
        self._rate_limited, self._retry_after = times, retry_after

    def fail_next(self, times: int, after: int = 0) -> None:
        """Answers `times` sends with HTTP 500, after letting `after` sends succeed."""
        self._fail_times, self._fail_after = times, after

    def refuse_next(self, status: int = 403, description: str = "Forbidden: bot was blocked by the user") -> None:
        """Answers the next send with this refusal (by default the 403 of a bot the user blocked)."""
        self._refuse = (status, description)

    def refuse_photos(self, times: int = 1) -> None:
        """Answers the next `times` sendPhoto calls 400 "Bad Request: PHOTO_INVALID_DIMENSIONS", as the Bot API
        answers a photo it will not show (too long, too wide)."""
        self.photos_refused = times

    def hold_sends_after(self, count: int) -> None:
        """Lets `count` more sends through, then holds each later one until `release_held` is set
        (a held send whose client goes away is never recorded)."""
        self._hold_after = len(self.sent) + count

    def delete_sent(self) -> None:
        """Deletes every message the bot sent so far: editing one answers "message to edit not found"."""
        for sent in self.sent:
            self._messages.pop((sent.chat, sent.message_id), None)

    def message(self, chat: int, text: str = "", *, user_id: int = 1001, first_name: str = "Ada",
                is_bot: bool = False, file: tuple[str, bytes] | None = None, photo: bytes | None = None,
                reply_to: int | None = None, topic: int | None = None, voice: tuple[bytes, int] | None = None,
                audio: tuple[str, bytes, int] | None = None) -> dict[str, Any]:
        """A message in `chat` from a user (or bot), stored so later messages can reply to it; `voice` is a
        voice note (OGG/Opus bytes, seconds), `audio` an audio file (name, bytes, seconds)."""
        key = str(chat)
        message: dict[str, Any] = {
            "message_id": next(self._next_message[key]), "date": int(time.time()),
            "chat": _chat(chat), "from": {"id": user_id, "is_bot": is_bot, "first_name": first_name},
        }
        text_key = "caption" if file or photo or voice or audio else "text"
        if text:
            message[text_key] = text
        if file is not None:
            message["document"] = {**self._store(*file), "file_name": file[0]}
        if voice is not None:
            message["voice"] = {**self._store("file_0.oga", voice[0]), "duration": voice[1],
                                "mime_type": "audio/ogg"}
        if audio is not None:
            message["audio"] = {**self._store(*audio[:2]), "duration": audio[2], "file_name": audio[0],
                                "mime_type": mimetypes.guess_type(audio[0])[0] or "audio/mpeg"}
        if photo is not None:
            small = self._store("small.jpg", photo[:10])
            large = self._store("large.jpg", photo)
            message["photo"] = [{**small, "width": 90, "height": 60}, {**large, "width": 1280, "height": 853}]
        if reply_to is not None:
            message["reply_to_message"] = self._messages[(key, reply_to)]
        if topic is not None:
            message.update(message_thread_id=topic, is_topic_message=True)
        self._messages[(key, message["message_id"])] = message
        return message

    def edit_last(self, chat: int, text: str, *, user_id: int = 1001) -> dict[str, Any]:
        """The user's latest message in `chat` edited to `text`, as an `edited_message` update carries it (its
        own message_id, an `edit_date`)."""
        key = str(chat)
        mine = [m for (c, _), m in self._messages.items() if c == key and m["from"]["id"] == user_id]
        assert mine, f"user {user_id} has no message in chat {chat} to edit"
        edited = {**mine[-1], "edit_date": mine[-1]["date"] + next(self._next_edit)}
        edited["caption" if "caption" in edited else "text"] = text
        self._messages[(key, edited["message_id"])] = edited
        return edited

    def callback_query(self, chat: int, data: str, *, user_id: int = 1001, first_name: str = "Ada",
                       query_id: str | None = None) -> dict[str, Any]:
        """A tap on the button with callback_data `data` under the bot's latest message in `chat` showing it,
        as Telegram sends it: the query's own id, who tapped, the message (keyboard included) and the data."""
        key = str(chat)
        shown = [m for (c, _), m in self._messages.items() if c == key and _has_button(m, data)]
        assert shown, f"no message of the bot in chat {chat} shows a button {data!r}"
        return {"id": query_id or str(next(self._next_query)), "chat_instance": f"ci{chat}", "data": data,
                "from": {"id": user_id, "is_bot": False, "first_name": first_name}, "message": shown[-1]}

    async def deliver(self, message: dict[str, Any], *, secret: str | None = None, kind: str = "message") -> int:
        """Hands one message (or, with `kind="callback_query"`, a tap) to the bot as an update: POSTed to
        the webhook if set, else polled."""
        update_id = next(self._next_update)
        update = {"update_id": update_id, kind: message}
        if self.webhook is not None:
            if not self._wanted(update):
                return update_id
            headers = {"X-Telegram-Bot-Api-Secret-Token": secret or self.webhook.get("secret_token", "")}
            async with aiohttp.ClientSession() as session, \
                    session.post(self.webhook["url"], json=update, headers=headers) as response:
                self.webhook_statuses.append(response.status)
            return update_id
        async with self._arrived:
            self._pending.append(update)
            self._arrived.notify_all()
        return update_id

    # --- the API ----------------------------------------------------------------------------

    async def _api(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return _error(401, "Unauthorized")
        method = request.match_info["method"]
        self.calls.append(method)
        params: dict[str, Any] = dict(await request.post()) if request.can_read_body else {}
        handler = getattr(self, f"_m_{method}", None)
        if handler is None:
            return _error(404, "Not Found")
        if method in SEND_METHODS and (refusal := self._refusal()) is not None:
            return refusal
        if method in SEND_METHODS and self._hold_after is not None and len(self.sent) >= self._hold_after:
            self.held += 1
            try:
                await self.release_held.wait()
            finally:
                self.held -= 1
        result: web.Response = await handler(params)
        return result

    def _refusal(self) -> web.Response | None:
        """The 429, 500 or refusal the next send gets, when one was asked for."""
        if self._refuse is not None:
            (status, description), self._refuse = self._refuse, None
            return _error(status, description)
        if self._rate_limited > 0:
            self._rate_limited -= 1
            return _error(429, f"Too Many Requests: retry after {self._retry_after:g}",
                          parameters={"retry_after": self._retry_after})
        if self._fail_after > 0:
            self._fail_after -= 1
        elif self._fail_times > 0:
            self._fail_times -= 1
            return _error(500, "Internal Server Error")
        return None

    async def _m_getMe(self, params: dict[str, Any]) -> web.Response:
        return _ok(BOT_USER)

    async def _m_deleteWebhook(self, params: dict[str, Any]) -> web.Response:
        self.webhook = None
        return _ok(True)

    async def _m_setWebhook(self, params: dict[str, Any]) -> web.Response:
        self.webhook = {"url": str(params["url"]), "secret_token": str(params.get("secret_token", ""))}
        self._allow(params)
        return _ok(True)

    async def _m_getUpdates(self, params: dict[str, Any]) -> web.Response:
        if self.webhook is not None:
            return _error(409, "Conflict: can't use getUpdates method while webhook is active")
        if self.fail_polls > 0:
            self.fail_polls -= 1
            return _error(502, "Bad Gateway")
        if self.polling:
            self.conflicts += 1
            return _error(409, "Conflict: terminated by other getUpdates request; make sure that only one "
                               "bot instance is running")
        self.polling += 1
        self.poll_times.append(time.monotonic())
        try:
            return await self._poll(params)
        finally:
            self.polling -= 1

    def _wanted(self, update: dict[str, Any]) -> bool:
        """Whether the bot asked for this kind of update (Telegram never sends the others)."""
        return not self.allowed_updates or any(kind in update for kind in self.allowed_updates)

    def _allow(self, params: dict[str, Any]) -> None:
        if params.get("allowed_updates"):
            self.allowed_updates = list(json.loads(params["allowed_updates"]))

    async def _poll(self, params: dict[str, Any]) -> web.Response:
        self._allow(params)
        offset = int(params.get("offset") or 0)
        async with self._arrived:
            self._pending = [u for u in self._pending if u["update_id"] >= offset and self._wanted(u)]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait_for(lambda: any(map(self._wanted, self._pending))),
                                       float(params.get("timeout") or 0))
            self._pending = [u for u in self._pending if self._wanted(u)]
            return _ok(list(self._pending))

    async def _m_sendMessage(self, params: dict[str, Any]) -> web.Response:
        markup = json.loads(params["reply_markup"]) if params.get("reply_markup") else None
        return self._record(params, text=str(params["text"]), markup=markup)

    async def _m_editMessageText(self, params: dict[str, Any]) -> web.Response:
        chat, message_id, text = str(params["chat_id"]), int(params["message_id"]), str(params["text"])
        return self._edit(chat, message_id, text, params.get("reply_markup"))

    async def _m_editMessageReplyMarkup(self, params: dict[str, Any]) -> web.Response:
        chat, message_id = str(params["chat_id"]), int(params["message_id"])
        message = self._messages.get((chat, message_id))
        return self._edit(chat, message_id, str((message or {}).get("text", "")), params.get("reply_markup"))

    def _edit(self, chat: str, message_id: int, text: str, markup: Any) -> web.Response:
        """An edit as Telegram makes it: the text and the keyboard replaced (no reply_markup: none left)."""
        message = self._messages.get((chat, message_id))
        if message is None:
            return _error(400, NOT_FOUND)
        keyboard = json.loads(markup) if markup else None
        if message.get("text") == text and message.get("reply_markup") == keyboard:
            return _error(400, NOT_MODIFIED)
        message.update(text=text, edit_date=int(time.time()))
        message.pop("reply_markup", None)
        if keyboard:
            message["reply_markup"] = keyboard
        self.edits.append(Edit(chat=chat, message_id=message_id, text=text, keyboard=bool(keyboard)))
        self.changed.set()
        return _ok(message)

    async def _m_answerCallbackQuery(self, params: dict[str, Any]) -> web.Response:
        self.answered.append((str(params["callback_query_id"]), str(params.get("text", ""))))
        self.changed.set()
        return _ok(True)

    async def _m_sendDocument(self, params: dict[str, Any]) -> web.Response:
        return self._media("sendDocument", params)

    async def _m_sendPhoto(self, params: dict[str, Any]) -> web.Response:
        if self.photos_refused > 0:
            self.photos_refused -= 1
            return _error(400, "Bad Request: PHOTO_INVALID_DIMENSIONS")
        return self._media("sendPhoto", params)

    async def _m_sendAudio(self, params: dict[str, Any]) -> web.Response:
        return self._media("sendAudio", params)

    async def _m_sendVoice(self, params: dict[str, Any]) -> web.Response:
        return self._media("sendVoice", params)

    async def _m_sendVideo(self, params: dict[str, Any]) -> web.Response:
        return self._media("sendVideo", params)

    def _media(self, method: str, params: dict[str, Any]) -> web.Response:
        upload = params[MEDIA_METHODS[method]]
        if upload.file.seek(0, 2) > UPLOAD_LIMIT:  # the Bot API server refuses the request: 413, no message
            return _error(413, "Request Entity Too Large")
        upload.file.seek(0)
        caption = str(params["caption"]) if params.get("caption") else None
        return self._record(params, filename=upload.filename, data=upload.file.read(), method=method, caption=caption)

    async def _m_sendChatAction(self, params: dict[str, Any]) -> web.Response:
        if self.fail_actions > 0:
            self.fail_actions -= 1
            return _error(500, "Internal Server Error")
        topic = params.get("message_thread_id")
        self.actions.append((str(params["chat_id"]), str(params["action"]), int(topic) if topic else None))
        return _ok(True)

    async def _m_getChatAdministrators(self, params: dict[str, Any]) -> web.Response:
        """The chat's administrators, the owner first, as https://core.telegram.org/bots/api#getchatadministrators
        answers: ChatMemberOwner (`creator`) and ChatMemberAdministrator objects; no bots are named here."""
        chat = str(params["chat_id"])
        if self.hang_admins.is_set():
            await asyncio.Event().wait()
        if self.fail_admins > 0:
            self.fail_admins -= 1
            return _error(500, "Internal Server Error")
        if int(chat) > 0:
            return _error(400, "Bad Request: there are no administrators in the private chat")
        admins = sorted(self.administrators.get(chat, {}).items(), key=lambda item: item[1] != "creator")
        return _ok([_chat_member(user_id, status) for user_id, status in admins])

    async def _m_getFile(self, params: dict[str, Any]) -> web.Response:
        file_id = str(params["file_id"])
        if file_id not in self.files:
            return _error(400, "Bad Request: invalid file_id")
        name, data = self.files[file_id]
        return _ok({"file_id": file_id, "file_unique_id": f"u{file_id}", "file_size": len(data),
                    "file_path": f"documents/{file_id}/{name}"})

    async def _download(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return web.Response(status=401)
        file_id = request.match_info["path"].split("/")[1]
        return web.Response(body=self.files[file_id][1])

    def _record(self, params: dict[str, Any], markup: dict[str, Any] | None = None, **content: Any) -> web.Response:
        chat = str(params["chat_id"])
        if chat in self.migrated:
            return _error(400, "Bad Request: group chat was upgraded to a supergroup chat",
                          parameters={"migrate_to_chat_id": self.migrated[chat]})
        topic = int(params["message_thread_id"]) if params.get("message_thread_id") else None
        reply = json.loads(params["reply_parameters"]) if params.get("reply_parameters") else {}
        rows = (markup or {}).get("inline_keyboard") or []
        sent = Sent(chat=chat, message_id=next(self._next_message[chat]), reply_to=reply.get("message_id"),
                    topic=topic, buttons=[(b["callback_data"], b["text"]) for row in rows for b in row], **content)
        self.sent.append(sent)
        message: dict[str, Any] = {"message_id": sent.message_id, "date": int(time.time()),
                                   "chat": _chat(int(chat)), "from": BOT_USER}
        if sent.text is not None:
            message["text"] = sent.text
        else:
            message.update(self._media_fields(sent))
        if topic is not None:
            message.update(message_thread_id=topic, is_topic_message=True)
        if markup:
            message["reply_markup"] = markup
        self._messages[(chat, sent.message_id)] = message
        self.changed.set()
        return _ok(message)

    def _media_fields(self, sent: Sent) -> dict[str, Any]:
        """The Message fields of a sent file, as the Bot API's Document, PhotoSize array, Audio, Voice, Video."""
        stored = self._store(sent.filename or "file", sent.data or b"")
        kind = MEDIA_METHODS.get(sent.method, "document")
        fields: dict[str, Any] = {"caption": sent.caption} if sent.caption else {}
        if kind == "photo":
            fields["photo"] = [{**stored, "width": 90, "height": 90}, {**stored, "width": 320, "height": 320}]
        elif kind == "video":
            fields["video"] = {**stored, "width": 320, "height": 240, "duration": 1, "file_name": sent.filename}
        elif kind in ("audio", "voice"):
            fields[kind] = {**stored, "duration": 1, **({"file_name": sent.filename} if kind == "audio" else {})}
        else:
            fields["document"] = {**stored, "file_name": sent.filename}
        return fields

    def _store(self, name: str, data: bytes) -> dict[str, Any]:
        file_id = f"f{next(self._next_file)}"
        self.files[file_id] = (name, data)
        return {"file_id": file_id, "file_unique_id": f"u{file_id}", "file_size": len(data)}


def _has_button(message: dict[str, Any], data: str) -> bool:
    rows = (message.get("reply_markup") or {}).get("inline_keyboard") or []
    return any(button.get("callback_data") == data for row in rows for button in row)


def _chat_member(user_id: int, status: str) -> dict[str, Any]:
    """A ChatMemberOwner or ChatMemberAdministrator with the fields the Bot API always sends."""
    user = {"id": user_id, "is_bot": False, "first_name": f"user{user_id}"}
    if status == "creator":
        return {"status": "creator", "user": user, "is_anonymous": False}
    rights = ("can_manage_chat", "can_delete_messages", "can_manage_video_chats", "can_restrict_members",
              "can_promote_members", "can_change_info", "can_invite_users", "can_post_stories", "can_edit_stories",
              "can_delete_stories")
    return {"status": "administrator", "user": user, "can_be_edited": False, "is_anonymous": False,
            **{right: right != "can_promote_members" for right in rights}}


def _chat(chat: int) -> dict[str, Any]:
    return {"id": chat, "type": "private" if chat > 0 else "supergroup"}


def _ok(result: Any) -> web.Response:
    return web.json_response({"ok": True, "result": result})


def _error(status: int, description: str, **extra: Any) -> web.Response:
    return web.json_response({"ok": False, "error_code": status, "description": description, **extra},
                             status=status)
