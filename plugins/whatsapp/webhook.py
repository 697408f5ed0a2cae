"""The Cloud API webhook: the subscription handshake, signed event posts, and the messages they carry."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from gateway import EventLog

log = logging.getLogger("switchyard.whatsapp")

SIGNATURE_HEADER = "X-Hub-Signature-256"
MAX_EVENT_BYTES = 8 * 1024 * 1024  # Meta batches many updates into one post under load
MEDIA_KINDS = ("document", "image", "video", "audio", "sticker")

EventHandler = Callable[[dict[str, Any]], Awaitable[None]]


def signature(secret: str, body: bytes) -> str:
    """The `X-Hub-Signature-256` value Meta sends for `body`: `sha256=<hex HMAC-SHA256>`."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def signature_is_valid(secret: str, body: bytes, header: str | None) -> bool:
    """Whether `header` is the app secret's signature of exactly these bytes (constant-time)."""
    if header is None:
        return False
    return hmac.compare_digest(signature(secret, body).encode(), header.strip().encode("utf-8", "replace"))


@dataclass(frozen=True)
class MediaRef:
    """A media object attached to an inbound message, downloadable by its id."""

    media_id: str
    kind: str
    filename: str | None
    mime_type: str | None


@dataclass(frozen=True)
class InboundMessage:
    """One user message taken out of a webhook event."""

    message_id: str
    phone_number_id: str
    sender_id: str
    sender_name: str
    timestamp_ms: int
    text: str
    media: MediaRef | None = None
    reply_to: str | None = None
    button: str | None = None  # the id of the reply button tapped (an interactive button_reply)
    edit_of: str | None = None  # set for an edit (type "edit"): the id of the message edited


def parse_messages(event: dict[str, Any]) -> list[InboundMessage]:
    """Every user message in an event (a webhook may batch several); statuses and other fields are skipped."""
    found: list[InboundMessage] = []
    for entry in event.get("entry") or []:
        for change in entry.get("changes") or []:
            if change.get("field") != "messages":
                continue
            value = change.get("value") or {}
            names = _contact_names(value.get("contacts") or [])
            phone_number_id = str((value.get("metadata") or {}).get("phone_number_id", ""))
            for raw in value.get("messages") or []:
                message = _parse_message(raw, phone_number_id, names)
                if message is not None:
                    found.append(message)
    return found


def _contact_names(contacts: list[dict[str, Any]]) -> dict[str, str]:
    """Sender id (wa_id and business-scoped user_id) → profile name."""
    names: dict[str, str] = {}
    for contact in contacts:
        name = str((contact.get("profile") or {}).get("name") or "")
        for key in ("wa_id", "user_id"):
            if contact.get(key):
                names[str(contact[key])] = name
    return names


def _parse_message(raw: dict[str, Any], phone_number_id: str, names: dict[str, str]) -> InboundMessage | None:
    """One message object as an InboundMessage; None for kinds without text or media."""
    sender = str(raw.get("from") or raw.get("from_user_id") or "")
    kind = str(raw.get("type", ""))
    if not sender or not raw.get("id"):
        return None
    edit = raw.get("edit") if kind == "edit" else None
    if isinstance(edit, dict):  # an edit (reported to Coexistence numbers only): the text or caption as now
        inner = edit.get("message") or {}
        text, media = _content(str(inner.get("type", "")), inner)
        media = None  # the file was taken in with the original
        if not edit.get("original_message_id"):
            return None
    else:
        text, media = _content(kind, raw)
    if text is None and media is None:
        log.debug("whatsapp: skipping a %r message", kind)
        return None
    try:
        timestamp_ms = int(raw.get("timestamp", 0)) * 1000
    except (TypeError, ValueError):
        timestamp_ms = 0
    context = raw.get("context") or {}
    return InboundMessage(
        message_id=str(raw["id"]), phone_number_id=phone_number_id, sender_id=sender,
        sender_name=names.get(sender) or sender, timestamp_ms=timestamp_ms, text=text or "", media=media,
        reply_to=str(context["id"]) if context.get("id") else None, button=_button_id(kind, raw),
        edit_of=str(edit["original_message_id"]) if isinstance(edit, dict) else None)


def _button_id(kind: str, raw: dict[str, Any]) -> str | None:
    """The id of the reply button an interactive `button_reply` taps (None for other messages)."""
    reply = (raw.get("interactive") or {}).get("button_reply") or {} if kind == "interactive" else {}
    return str(reply["id"]) if reply.get("id") else None


def _content(kind: str, raw: dict[str, Any]) -> tuple[str | None, MediaRef | None]:
    """The text of a message, and its media if it carries one; (None, None) for kinds not handled."""
    body = raw.get(kind) or {}
    if kind == "text":
        return str(body.get("body", "")), None
    if kind in MEDIA_KINDS and body.get("id"):
        media = MediaRef(str(body["id"]), kind, body.get("filename"), body.get("mime_type"))
        return str(body.get("caption") or ""), media
    if kind == "interactive":
        reply = body.get("button_reply") or body.get("list_reply") or {}
        return (str(reply["title"]), None) if reply.get("title") else (None, None)
    if kind == "button":
        return (str(body["text"]), None) if body.get("text") else (None, None)
    if kind == "location":
        place = " ".join(str(body[k]) for k in ("name", "address") if body.get(k))
        return f"[location: {body.get('latitude')}, {body.get('longitude')}{' ' + place if place else ''}]", None
    return None, None


class WebhookServer:
    """Serves the webhook endpoint on `host:port/path` with aiohttp.

    GET answers Meta's subscription check; POST accepts only events signed with the app secret
    and hands each to `on_event` before answering, so a 200 means the event is safely queued
    (an error answers 500 and Meta delivers the event again later).
    """

    def __init__(self, host: str, port: int, path: str, *, app_secret: str, verify_token: str | None,
                 on_event: EventHandler, events: EventLog, profile_id: str):
        self.host, self.port, self.path = host, port, path
        self._app_secret = app_secret
        self._verify_token = verify_token
        self._on_event = on_event
        self._events = events
        self._profile_id = profile_id
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        """The local URL of the endpoint (with the port actually bound)."""
        return f"http://{self.host}:{self.port}{self.path}"

    async def start(self) -> None:
        """Binds the listening socket; raises RuntimeError when it cannot."""
        app = web.Application(client_max_size=MAX_EVENT_BYTES)
        app.router.add_get(self.path, self._verify)
        app.router.add_post(self.path, self._receive)
        # No access log: the verification query string carries the verify token.
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=5.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            self._runner = None
            raise RuntimeError(f"cannot listen for WhatsApp webhooks on {self.host}:{self.port}: {exc}") from exc
        if self.port == 0 and self._runner.addresses:
            self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        """Stops listening, letting requests in progress finish (up to 5 s)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _verify(self, request: web.Request) -> web.Response:
        """Answers Meta's subscription check: the challenge for the right verify token, else 403."""
        query = request.query
        token_ok = self._verify_token is not None and hmac.compare_digest(
            query.get("hub.verify_token", "").encode(), self._verify_token.encode())
        if query.get("hub.mode") == "subscribe" and token_ok:
            return web.Response(text=query.get("hub.challenge", ""))
        self._reject("verification with a wrong verify token")
        return web.Response(status=403, text="forbidden")

    async def _receive(self, request: web.Request) -> web.Response:
        """Takes one signed event: 401/403 when unsigned or forged, 200 once queued, 500 if not."""
        body = await request.read()
        header = request.headers.get(SIGNATURE_HEADER)
        if header is None:
            self._reject("event without a signature")
            return web.Response(status=401, text="missing signature")
        if not signature_is_valid(self._app_secret, body, header):
            self._reject("event with a bad signature")
            return web.Response(status=403, text="bad signature")
        try:
            event = json.loads(body)
        except ValueError:
            return web.Response(status=400, text="not JSON")
        if not isinstance(event, dict):
            return web.Response(status=400, text="not an event")
        try:
            await self._on_event(event)
        except Exception:
            log.exception("whatsapp profile %s could not queue a webhook event", self._profile_id)
            return web.Response(status=500, text="not queued")
        return web.Response(text="ok")

    def _reject(self, reason: str) -> None:
        """Logs and records a refused webhook request (never its content)."""
        log.warning("whatsapp profile %s rejected a webhook request: %s", self._profile_id, reason)
        self._events.emit("webhook.rejected", channel="whatsapp", profile=self._profile_id, reason=reason)
