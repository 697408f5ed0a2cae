"""A fake WhatsApp Cloud API: the Graph endpoints the plugin calls (text; media messages of type image, audio,
video and document, each checked against the uploaded media's MIME type and Meta's size for that type as
https://developers.facebook.com/docs/whatsapp/cloud-api/reference/media#supported-media-types lists them, else
400 (#131009) Parameter value is not valid; interactive reply buttons checked against Meta's limits), and signed
webhooks it can post (messages, button replies). Each accepted message body is in `recorded.messages`."""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from gateway.testing.conformance import SentItem
from plugins.whatsapp.webhook import SIGNATURE_HEADER, signature
from tests.fakes.base import FakeServer

API_VERSION = "v21.0"

MIB = 1 << 20
MEDIA_TYPES: dict[str, tuple[frozenset[str], int]] = {
    "image": (frozenset({"image/jpeg", "image/png"}), 5 * MIB),
    "audio": (frozenset({"audio/aac", "audio/amr", "audio/mpeg", "audio/mp4", "audio/x-m4a", "audio/ogg"}), 16 * MIB),
    "video": (frozenset({"video/mp4", "video/3gpp"}), 16 * MIB),
}
"""The Cloud API's media message types other than document: the MIME types each takes and its size."""
DOCUMENT_LIMIT = 100 * MIB

REFUSALS = {
    131047: ("(#131047) Re-engagement message", "Message failed to send because more than 24 hours have passed "
             "since the customer last replied to this number."),
    131026: ("(#131026) Message Undeliverable", "Message Undeliverable."),
}
"""Meta's wording of permanent message refusals: code -> (message, error_data.details)."""


@dataclass
class Upload:
    """A media object: uploaded by the bot, or offered to it in an inbound message."""

    data: bytes
    mime_type: str
    filename: str | None = None


@dataclass
class SendRules:
    """How the fake answers the next message sends: a refusal, rate limits, then server errors."""

    refuse_code: int | None = None
    rate_limited: int = 0
    retry_after: float | None = None
    rate_limit_code: int = 130429
    fail: int = 0
    fail_after: int = 0


@dataclass
class Recorded:
    """What the bot did, as the fake saw it."""

    sent: list[SentItem] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)  # every accepted message body
    wamids: list[str] = field(default_factory=list)  # the wamid given to each, in the same order
    read_receipts: list[dict[str, Any]] = field(default_factory=list)  # status: read (+ typing)
    send_attempts: int = 0


class FakeWhatsApp(FakeServer):
    """Speaks just enough Graph API for one business phone number, and plays Meta's webhook side.

    Set `webhook_url` (the plugin's endpoint) before injecting inbound events.
    """

    def __init__(self, *, token: str = "EAAG-fake-access-token-0123456789", phone_number_id: str = "106540352242922",
                 display_phone_number: str = "+1 555-010-9999", app_secret: str = "fake-app-secret-abcdef",
                 verify_token: str = "fake-verify-token-123456"):
        self.token = token
        self.phone_number_id = phone_number_id
        self.display_phone_number = display_phone_number
        self.app_secret = app_secret
        self.verify_token = verify_token
        self.webhook_url: str | None = None
        self.rules = SendRules()
        self.recorded = Recorded()
        self.media: dict[str, Upload] = {}
        super().__init__()

    @property
    def api_base_url(self) -> str:
        return f"{self.url}/{API_VERSION}"

    @property
    def own_wa_id(self) -> str:
        return "".join(ch for ch in self.display_phone_number if ch.isdigit())

    def setup_routes(self, app: web.Application) -> None:
        app.router.add_get(f"/{API_VERSION}/{{node}}", self._get_node)
        app.router.add_post(f"/{API_VERSION}/{{phone}}/messages", self._post_message)
        app.router.add_post(f"/{API_VERSION}/{{phone}}/media", self._post_media)
        app.router.add_get("/download/{media_id}", self._download)

    # --- controls -----------------------------------------------------------------------------

    def rate_limit_next(self, times: int, retry_after: float | None, code: int = 130429) -> None:
        """Answers the next `times` sends with HTTP 429 (Retry-After header only when given)."""
        self.rules.rate_limited, self.rules.retry_after, self.rules.rate_limit_code = times, retry_after, code

    def fail_next(self, times: int, after: int = 0) -> None:
        """Answers `times` sends with HTTP 500 after letting `after` sends succeed."""
        self.rules.fail, self.rules.fail_after = times, after

    def refuse_next(self, code: int = 131047) -> None:
        """Answers the next send with Meta's HTTP 400 refusal of this code (see REFUSALS)."""
        assert code in REFUSALS, f"no refusal wording for code {code}"
        self.rules.refuse_code = code

    # --- Graph API ----------------------------------------------------------------------------

    def _authorized(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bearer {self.token}"

    async def _get_node(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return _error(401, 190, "Invalid OAuth access token - Cannot parse access token")
        node = request.match_info["node"]
        if node == self.phone_number_id:
            return web.json_response({"id": node, "display_phone_number": self.display_phone_number,
                                      "verified_name": "Switchyard Test"})
        if node in self.media:
            upload = self.media[node]
            return web.json_response({"messaging_product": "whatsapp", "id": node,
                                      "url": f"{self.url}/download/{node}", "mime_type": upload.mime_type,
                                      "file_size": len(upload.data)})
        return _error(400, 100, f"Unsupported get request. Object with ID '{node}' does not exist")

    async def _download(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return web.Response(status=401)
        upload = self.media.get(request.match_info["media_id"])
        if upload is None:
            return web.Response(status=404)
        return web.Response(body=upload.data, content_type=upload.mime_type)

    async def _post_media(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return _error(401, 190, "Invalid OAuth access token")
        form = await request.post()
        file = form.get("file")
        if form.get("messaging_product") != "whatsapp" or not isinstance(file, web.FileField):
            return _error(400, 100, "(#100) The parameter messaging_product is required.")
        media_id = str(secrets.randbelow(10**15) + 10**15)
        self.media[media_id] = Upload(file.file.read(), str(form.get("type", "")), file.filename)
        return web.json_response({"id": media_id})

    async def _post_message(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return _error(401, 190, "Invalid OAuth access token")
        if request.match_info["phone"] != self.phone_number_id:
            return _error(400, 100, "Unsupported post request")
        body = await request.json()
        if body.get("messaging_product") != "whatsapp":
            return _error(400, 100, "(#100) The parameter messaging_product is required.")
        if body.get("status") == "read":
            self.recorded.read_receipts.append(body)
            return web.json_response({"success": True})
        refused = self._apply_rules()
        if refused is not None:
            return refused
        item = self._record(body)
        if item is None:
            return _error(400, 131009, "(#131009) Parameter value is not valid")
        wamid = f"wamid.{secrets.token_hex(20).upper()}"
        self.recorded.messages.append(body)
        self.recorded.wamids.append(wamid)
        self.recorded.sent.append(item)
        self.changed.set()
        return web.json_response({"messaging_product": "whatsapp",
                                  "contacts": [{"input": body["to"], "wa_id": body["to"]}],
                                  "messages": [{"id": wamid}]})

    def _apply_rules(self) -> web.Response | None:
        self.recorded.send_attempts += 1
        rules = self.rules
        if rules.refuse_code is not None:
            code, rules.refuse_code = rules.refuse_code, None
            message, details = REFUSALS[code]
            return _error(400, code, message, details=details)
        if rules.rate_limited > 0:
            rules.rate_limited -= 1
            headers = {"Retry-After": str(rules.retry_after)} if rules.retry_after is not None else {}
            return _error(429, rules.rate_limit_code, "(#130429) Rate limit hit", headers=headers)
        if rules.fail > 0:
            if rules.fail_after > 0:
                rules.fail_after -= 1
            else:
                rules.fail -= 1
                return _error(500, 1, "An unknown error occurred")
        return None

    def _record(self, body: dict[str, Any]) -> SentItem | None:
        reply_to = (body.get("context") or {}).get("message_id")
        if body.get("type") == "text":
            return SentItem(conversation=body["to"], text=body["text"]["body"], reply_to=reply_to)
        if body.get("type") == "interactive":
            interactive = body["interactive"]
            text = str((interactive.get("body") or {}).get("text") or "")
            buttons = [(b["reply"]["id"], b["reply"]["title"]) for b in interactive["action"]["buttons"]]
            fits = 1 <= len(buttons) <= 3 and all(0 < len(title) <= 20 and len(i) <= 256 for i, title in buttons)
            if interactive.get("type") != "button" or not fits or not 0 < len(text) <= 1024:
                return None  # Meta: (#131009) Parameter value is not valid
            return SentItem(conversation=body["to"], text=text, reply_to=reply_to, buttons=buttons)
        kind = str(body.get("type"))
        if kind == "document" or kind in MEDIA_TYPES:
            upload = self.media.get(body[kind].get("id", ""))
            types, limit = MEDIA_TYPES.get(kind, (None, DOCUMENT_LIMIT))
            if upload is None or (types is not None and upload.mime_type not in types) or len(upload.data) > limit:
                return None
            name = body[kind].get("filename") or upload.filename
            return SentItem(conversation=body["to"], text=body[kind].get("caption"), filename=name, data=upload.data,
                            reply_to=reply_to)
        return None

    # --- the webhook side (Meta → the plugin) ------------------------------------------------

    async def post_event(self, event: dict[str, Any], *, signed: bool = True,
                         signature_override: str | None = None) -> int:
        """POSTs an event to the plugin's webhook like Meta does; returns the HTTP status."""
        assert self.webhook_url, "set webhook_url first"
        body = json.dumps(event).encode()
        headers = {"Content-Type": "application/json"}
        if signature_override is not None:
            headers[SIGNATURE_HEADER] = signature_override
        elif signed:
            headers[SIGNATURE_HEADER] = signature(self.app_secret, body)
        async with aiohttp.ClientSession() as session, session.post(
                self.webhook_url, data=body, headers=headers) as response:
            return response.status

    async def verify(self, *, token: str, challenge: str = "1158201444", mode: str = "subscribe") -> tuple[int, str]:
        """Performs Meta's subscription check against the plugin; returns (status, body)."""
        assert self.webhook_url, "set webhook_url first"
        params = {"hub.mode": mode, "hub.verify_token": token, "hub.challenge": challenge}
        async with aiohttp.ClientSession() as session, session.get(self.webhook_url, params=params) as response:
            return response.status, await response.text()

    def message(self, text: str, *, sender_id: str = "15551234567", sender: str = "Ada",
                file: tuple[str, bytes] | None = None, reply_to: str | None = None,
                kind: str | None = None, mime_type: str = "text/plain") -> dict[str, Any]:
        """One inbound message object (with a new wamid); a file is offered as a document."""
        message: dict[str, Any] = {"from": sender_id, "id": f"wamid.{secrets.token_hex(20).upper()}",
                                   "timestamp": str(int(time.time()))}
        if file is not None or kind is not None:
            media_id = str(secrets.randbelow(10**15) + 10**15)
            name, data = file if file is not None else (None, b"")
            self.media[media_id] = Upload(data, mime_type, name)
            kind = kind or "document"
            media: dict[str, Any] = {"id": media_id, "mime_type": mime_type, "sha256": "x"}
            if text:
                media["caption"] = text
            if kind == "document" and name:
                media["filename"] = name
            message.update({"type": kind, kind: media})
        else:
            message.update({"type": "text", "text": {"body": text}})
        if reply_to is not None:
            message["context"] = {"from": self.own_wa_id, "id": reply_to}
        return message

    def button_reply(self, button_id: str, *, sender_id: str = "15551234567",
                     shown_to: str | None = None) -> dict[str, Any]:
        """The message of a user tapping the reply button `button_id` of the bot's latest interactive message
        to `shown_to` (default: the user) showing it, as the webhook carries it: its own wamid, the button's
        id and title, and the context (the tapped message)."""
        to = shown_to or sender_id
        shown = [(wamid, body) for wamid, body in zip(self.recorded.wamids, self.recorded.messages, strict=True)
                 if body.get("type") == "interactive" and body["to"] == to
                 and any(b["reply"]["id"] == button_id for b in body["interactive"]["action"]["buttons"])]
        assert shown, f"no interactive message to {to} shows a button {button_id!r}"
        wamid, body = shown[-1]
        title = next(b["reply"]["title"] for b in body["interactive"]["action"]["buttons"]
                     if b["reply"]["id"] == button_id)
        return {"from": sender_id, "id": f"wamid.{secrets.token_hex(20).upper()}", "timestamp": str(int(time.time())),
                "type": "interactive", "context": {"from": self.own_wa_id, "id": wamid},
                "interactive": {"type": "button_reply", "button_reply": {"id": button_id, "title": title}}}

    def edit(self, original: str, text: str, *, sender_id: str) -> dict[str, Any]:
        """The message object Meta posts when the user edits the message `original` to `text` (type `edit`,
        reported to Coexistence numbers): an id of its own, `edit.original_message_id`, the message as now."""
        return {"from": sender_id, "id": f"wamid.{secrets.token_hex(20).upper()}", "timestamp": str(int(time.time())),
                "type": "edit", "edit": {"original_message_id": original,
                                         "message": {"type": "text", "text": {"body": text}}}}

    def event(self, messages: list[dict[str, Any]], *, names: dict[str, str] | None = None,
              phone_number_id: str | None = None, statuses: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """A `messages` webhook event wrapping message (or status) objects, as Meta posts it."""
        value: dict[str, Any] = {
            "messaging_product": "whatsapp",
            "metadata": {"display_phone_number": self.own_wa_id,
                         "phone_number_id": phone_number_id or self.phone_number_id},
        }
        if messages:
            senders = dict.fromkeys(m["from"] for m in messages)
            value["contacts"] = [{"profile": {"name": (names or {}).get(s, "Ada")}, "wa_id": s} for s in senders]
            value["messages"] = messages
        if statuses:
            value["statuses"] = statuses
        return {"object": "whatsapp_business_account",
                "entry": [{"id": "102290129340398", "changes": [{"value": value, "field": "messages"}]}]}

    async def user_says(self, text: str, *, sender_id: str = "15551234567", sender: str = "Ada",
                        file: tuple[str, bytes] | None = None, reply_to: str | None = None) -> str:
        """Delivers one user message to the plugin; returns its wamid (asserts the webhook took it)."""
        message = self.message(text, sender_id=sender_id, sender=sender, file=file, reply_to=reply_to)
        status = await self.post_event(self.event([message], names={sender_id: sender}))
        assert status == 200, f"webhook answered {status}"
        return str(message["id"])

    async def bot_says(self, text: str) -> None:
        """Delivers a message from the business number itself (as a coexistence echo would)."""
        message = self.message(text, sender_id=self.own_wa_id, sender="Switchyard Test")
        status = await self.post_event(self.event([message], names={self.own_wa_id: "Switchyard Test"}))
        assert status == 200, f"webhook answered {status}"


def _error(status: int, code: int, message: str, *, headers: dict[str, str] | None = None,
           details: str | None = None) -> web.Response:
    """A Graph API error answer (with `error_data.details` when given)."""
    error: dict[str, Any] = {"message": message, "type": "OAuthException", "code": code}
    if details is not None:
        error["error_data"] = {"messaging_product": "whatsapp", "details": details}
    body = {"error": {**error, "fbtrace_id": secrets.token_hex(8)}}
    return web.json_response(body, status=status, headers=headers)
