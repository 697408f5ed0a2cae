"""A small aiohttp client of the WhatsApp Cloud API (Graph API): messages, media, read receipts."""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp

from gateway import Button, DeliveryError, PermanentError
from gateway.channelkit.backoff import delay as backoff_delay
from plugins.whatsapp.media import mime_of

log = logging.getLogger("switchyard.whatsapp")

RATE_LIMIT_CODES = frozenset({4, 80007, 130429, 131056})
"""Graph error codes that mean "slow down": app, account, throughput and pair rate limits."""

PERMANENT_CODES = frozenset({100, 131026, 131047, 131051})
"""Graph error codes (with HTTP 400) that refuse a message for good: invalid parameter (e.g. the
recipient), undeliverable, outside the 24-hour customer service window, unsupported message type."""


class GraphError(DeliveryError):
    """An error answer (or no answer) of the Graph API, with the wait it asked for if any."""

    def __init__(self, message: str, *, status: int = 0, code: int | None = None,
                 retry_after: float | None = None):
        super().__init__(message, retry_after=retry_after)
        self.status = status
        self.code = code

    @property
    def rate_limited(self) -> bool:
        """Whether the platform asked to slow down (HTTP 429 or a rate-limit code)."""
        return self.status == 429 or self.code in RATE_LIMIT_CODES

    @property
    def permanent(self) -> bool:
        """Whether the platform refused a message for good (HTTP 400 with a permanent code)."""
        return self.status == 400 and self.code in PERMANENT_CODES


class MessageRefused(PermanentError):
    """The Cloud API refused a message for good: the dispatcher dead-letters it instead of retrying."""

    def __init__(self, message: str, *, code: int | None):
        super().__init__(message)
        self.code = code


class CloudApi:
    """Calls the Cloud API for one business phone number, waiting out short rate limits.

    `max_wait_s` bounds the total time one call may spend waiting for rate limits; beyond it the
    call raises GraphError with `retry_after` so the dispatcher retries the delivery later.
    """

    def __init__(self, base_url: str, phone_number_id: str, token: str, *, timeout_s: float = 60.0,
                 max_wait_s: float = 30.0, backoff_s: float = 1.0):
        self.base_url = base_url.rstrip("/")
        self.phone_number_id = phone_number_id
        self._token = token
        self._timeout_s = timeout_s
        self.max_wait_s = max_wait_s
        self.backoff_s = backoff_s
        self._session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        """Creates the HTTP session (proxies from the environment are honoured)."""
        self._session = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {self._token}"},
            timeout=aiohttp.ClientTimeout(total=self._timeout_s), trust_env=True)

    async def close(self) -> None:
        """Closes the HTTP session."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _url(self, path: str) -> str:
        """The full URL of a Graph API path."""
        return f"{self.base_url}/{path.lstrip('/')}"

    async def phone_number(self) -> dict[str, Any]:
        """The business phone number's profile; proves the token and the phone number id work."""
        return await self._json("GET", self._url(self.phone_number_id),
                                params={"fields": "display_phone_number,verified_name"})

    async def send_text(self, to: str, text: str, *, reply_to: str | None = None) -> str:
        """Sends a text message; returns its wamid."""
        return await self._send_message(to, "text", {"body": text, "preview_url": False}, reply_to)

    async def send_buttons(self, to: str, text: str, buttons: Sequence[Button], *,
                           reply_to: str | None = None) -> str:
        """Sends text with up to three reply buttons (an interactive message); returns its wamid."""
        action = {"buttons": [{"type": "reply", "reply": {"id": b.id, "title": b.label}} for b in buttons]}
        return await self._send_message(to, "interactive", {"type": "button", "body": {"text": text},
                                                            "action": action}, reply_to)

    async def send_media(self, to: str, kind: str, media_id: str, filename: str, *, caption: str = "",
                         reply_to: str | None = None) -> str:
        """Sends an uploaded file as an `image`, `audio`, `video` or `document` message (plugins.whatsapp.media);
        a document keeps its file name; every kind but audio takes a caption. Returns its wamid."""
        body: dict[str, Any] = {"id": media_id}
        if kind == "document":
            body["filename"] = filename
        if caption and kind != "audio":
            body["caption"] = caption
        return await self._send_message(to, kind, body, reply_to)

    async def upload_media(self, filename: str, data: bytes) -> str:
        """Uploads a file's bytes (read through the gateway) for this phone number; returns the media id."""
        mime = mime_of(filename)

        def form() -> aiohttp.FormData:
            """A fresh multipart body (aiohttp consumes one per request)."""
            built = aiohttp.FormData()
            built.add_field("messaging_product", "whatsapp")
            built.add_field("type", mime)
            built.add_field("file", data, filename=filename, content_type=mime)
            return built

        answer = await self._patiently("POST", self._url(f"{self.phone_number_id}/media"), form=form)
        if not answer.get("id"):
            raise GraphError(f"the media upload answered without an id: {str(answer)[:200]}")
        return str(answer["id"])

    async def download_media(self, media_id: str) -> tuple[bytes, str]:
        """Fetches an inbound media object: its URL first, then the bytes; returns (bytes, mime type)."""
        meta = await self._json("GET", self._url(media_id))
        session = self._require_session()
        try:
            async with session.get(str(meta["url"])) as response:
                if response.status >= 400:
                    raise GraphError(f"media download answered HTTP {response.status}", status=response.status)
                return await response.read(), str(meta.get("mime_type") or response.content_type)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise GraphError(f"cannot download media {media_id}: {exc or type(exc).__name__}") from exc

    async def mark_read_typing(self, message_id: str) -> None:
        """Marks a received message as read and shows the typing indicator (one call, no retry)."""
        await self._json("POST", self._url(f"{self.phone_number_id}/messages"), json={
            "messaging_product": "whatsapp", "status": "read", "message_id": message_id,
            "typing_indicator": {"type": "text"}})

    async def _send_message(self, to: str, kind: str, content: dict[str, Any], reply_to: str | None) -> str:
        """POSTs one message (quoting `reply_to` when given); returns its wamid, or raises MessageRefused."""
        body: dict[str, Any] = {"messaging_product": "whatsapp", "recipient_type": "individual", "to": to,
                                "type": kind, kind: content}
        if reply_to:
            body["context"] = {"message_id": reply_to}
        try:
            answer = await self._patiently("POST", self._url(f"{self.phone_number_id}/messages"), body=body)
        except GraphError as exc:
            if not exc.permanent:
                raise
            reason = str(exc).replace(self._token, "***")
            raise MessageRefused(f"the Cloud API refused the message for good: {reason}", code=exc.code) from None
        try:
            return str(answer["messages"][0]["id"])
        except (KeyError, IndexError, TypeError):
            raise GraphError(f"the Cloud API accepted a message without its id: {str(answer)[:200]}") from None

    async def _patiently(self, method: str, url: str, *, body: dict[str, Any] | None = None,
                         form: Callable[[], aiohttp.FormData] | None = None) -> dict[str, Any]:
        """Makes a call, sleeping through rate limits while the total wait stays within `max_wait_s`."""
        waited = 0.0
        for attempt in range(100):
            try:
                return await self._json(method, url, json=body, data=form() if form else None)
            except GraphError as exc:
                if not exc.rate_limited:
                    raise
                wait = exc.retry_after
                if wait is None:
                    wait = backoff_delay(attempt + 1, self.backoff_s, math.inf, jitter=(0.8, 1.2))
                if waited + wait > self.max_wait_s:
                    raise GraphError(f"rate limited by the Cloud API: {exc}", status=exc.status, code=exc.code,
                                     retry_after=wait) from exc
                log.info("whatsapp rate limit (%s); retrying in %.1fs", exc, wait)
                await asyncio.sleep(wait)
                waited += wait
        raise GraphError("rate limited by the Cloud API too many times", retry_after=self.max_wait_s)

    async def _json(self, method: str, url: str, **kwargs: Any) -> dict[str, Any]:
        """One request; a JSON object back, or GraphError carrying the platform's reason."""
        session = self._require_session()
        try:
            async with session.request(method, url, **kwargs) as response:
                status, text = response.status, await response.text()
                retry_after = response.headers.get("Retry-After")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise GraphError(f"cannot reach the Cloud API at {self.base_url}: "
                             f"{exc or type(exc).__name__}") from exc
        if status >= 400:
            raise _graph_error(status, text, retry_after)
        try:
            answer = json.loads(text)
        except ValueError as exc:
            raise GraphError(f"the Cloud API answered HTTP {status} with invalid JSON", status=status) from exc
        if not isinstance(answer, dict):
            raise GraphError(f"the Cloud API answered HTTP {status} with unexpected JSON", status=status)
        return answer

    def _require_session(self) -> aiohttp.ClientSession:
        """The open session, or GraphError before `open()`."""
        if self._session is None:
            raise GraphError("the WhatsApp client is not started")
        return self._session


def _graph_error(status: int, text: str, retry_after: str | None) -> GraphError:
    """Builds a GraphError from an error answer: `{"error": {"message", "code", "error_data"}}`."""
    message, code = text[:300], None
    try:
        error = json.loads(text).get("error", {})
        code = int(error["code"]) if "code" in error else None
        details = (error.get("error_data") or {}).get("details")
        message = error.get("message") or message
        if details:
            message = f"{message} ({details})"
    except (ValueError, AttributeError, TypeError):
        pass
    label = f"HTTP {status}" + (f", code {code}" if code is not None else "")
    return GraphError(f"{label}: {message}", status=status, code=code, retry_after=_seconds(retry_after))


def _seconds(value: str | None) -> float | None:
    """A Retry-After value in seconds (fractions allowed), or None when absent or unreadable."""
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
