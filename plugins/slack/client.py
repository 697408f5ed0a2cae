"""The Slack Web API calls the channel makes, through slack_sdk, with rate limits waited out."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from gateway import DeliveryError, PermanentError
from plugins.slack.inbound import BotIdentity

log = logging.getLogger("switchyard.slack")

MAX_INLINE_WAIT_S = 30.0  # a longer retry-after goes back to the dispatcher as DeliveryError(retry_after)
DOWNLOAD_TIMEOUT_S = 120.0
NETWORK_ERRORS = (SlackClientError, aiohttp.ClientError, asyncio.TimeoutError, OSError)
PERMANENT_ERRORS = frozenset({  # Slack's refusals that no retry can fix: the bot is out, the channel gone
    "channel_not_found", "not_in_channel", "is_archived", "channel_is_archived", "account_inactive",
    "restricted_action", "cannot_reply_to_message",
})
MESSAGE_GONE = frozenset({"message_not_found", "cant_update_message", "edit_window_closed"})  # chat.update
T = TypeVar("T")


def sdk_logger() -> logging.Logger:
    """The logger handed to slack_sdk and bolt, held at INFO or above: their DEBUG lines print request
    parameters, and apps.connections.open carries the app token as one."""
    logger = logging.getLogger("switchyard.slack.sdk")
    if logger.level < logging.INFO:
        logger.setLevel(logging.INFO)
    return logger


class SlackApi:
    """One workspace's Web API client (bot token) plus the few calls and downloads the channel needs."""

    def __init__(self, token: str, base_url: str, *, token_env: str):
        self.web = AsyncWebClient(token=token, base_url=base_url, logger=sdk_logger())
        self.base_url = base_url
        self._token = token
        self._token_env = token_env
        self._names: dict[str, str] = {}

    async def login(self) -> BotIdentity:
        """Checks the bot token with auth.test; raises RuntimeError naming the variable, never the token."""
        try:
            response = await self.web.auth_test()
        except SlackApiError as exc:
            raise RuntimeError(f"Slack rejected the bot token from ${self._token_env}: "
                               f"{exc.response.get('error') or exc.response.status_code}") from None
        except NETWORK_ERRORS as exc:
            raise RuntimeError(f"cannot reach the Slack API at {self.base_url}: {type(exc).__name__}: {exc}") from None
        return BotIdentity(user_id=str(response["user_id"]), bot_id=response.get("bot_id"))

    async def call(self, label: str, request: Callable[[], Awaitable[T]]) -> T:
        """Runs one API request; a short rate limit is waited out and retried, a refusal in
        PERMANENT_ERRORS raises PermanentError, anything else DeliveryError (a long rate limit with
        its retry_after, for the dispatcher to wait)."""
        waited = 0.0
        while True:
            try:
                return await request()
            except SlackApiError as exc:
                status, error = exc.response.status_code, exc.response.get("error")
                if error in PERMANENT_ERRORS:
                    raise PermanentError(f"Slack {label} refused: {error}") from None
                if status != 429 and error != "ratelimited":
                    raise DeliveryError(f"Slack {label} failed: HTTP {status} {error or ''}".strip()) from None
                retry_after = _retry_after(exc.response.headers)
                if waited + retry_after > MAX_INLINE_WAIT_S:
                    raise DeliveryError(f"Slack {label} rate limited", retry_after=retry_after) from None
                log.info("Slack %s rate limited; retrying in %.1fs", label, retry_after)
                await asyncio.sleep(retry_after)
                waited += retry_after
            except NETWORK_ERRORS as exc:
                raise DeliveryError(f"Slack {label} failed: {type(exc).__name__}: {exc}") from None

    async def post_message(self, channel: str, text: str, thread_ts: str | None,
                           blocks: list[dict[str, Any]] | None = None) -> str:
        """Posts one text message (in a thread when `thread_ts` is set; laid out by `blocks` when given,
        `text` then being what notifications show); returns its ts."""
        response = await self.call("chat.postMessage", lambda: self.web.chat_postMessage(
            channel=channel, text=text, thread_ts=thread_ts, blocks=blocks, unfurl_links=False, unfurl_media=False))
        return str(response["ts"])

    async def update_message(self, channel: str, ts: str, text: str,
                             blocks: list[dict[str, Any]] | None = None) -> bool:
        """Replaces the text (and blocks) of a message the bot posted; False when that message is gone."""
        async def request() -> AsyncSlackResponse | None:
            try:
                return await self.web.chat_update(channel=channel, ts=ts, text=text, blocks=blocks)
            except SlackApiError as exc:
                if exc.response.get("error") in MESSAGE_GONE:
                    return None
                raise

        return await self.call("chat.update", request) is not None

    async def post_ephemeral(self, channel: str, user: str, text: str, thread_ts: str | None) -> str:
        """Posts one text message only `user` sees, in the channel (and thread); returns its ts."""
        response = await self.call("chat.postEphemeral", lambda: self.web.chat_postEphemeral(
            channel=channel, user=user, text=text, thread_ts=thread_ts))
        return str(response["message_ts"])

    async def upload(self, channel: str, thread_ts: str | None, filename: str, data: bytes) -> str:
        """Shares one file through file upload v2 (get URL, POST bytes, complete); returns the file id."""
        response = await self.call("files.upload_v2", lambda: self.web.files_upload_v2(
            channel=channel, thread_ts=thread_ts, filename=filename, file=data, title=filename))
        files: list[dict[str, Any]] = response.get("files") or []
        return str(files[0]["id"]) if files else filename

    async def react(self, channel: str, ts: str, name: str, *, remove: bool = False) -> None:
        """Adds (or removes) an emoji reaction on a message; raises DeliveryError on failure."""
        method = self.web.reactions_remove if remove else self.web.reactions_add
        await self.call("reactions.remove" if remove else "reactions.add",
                        lambda: method(channel=channel, timestamp=ts, name=name))

    async def user_name(self, user_id: str) -> str:
        """The user's display name (users.info, cached); the user id when it cannot be read."""
        if user_id not in self._names:
            try:
                user = (await self.web.users_info(user=user_id)).get("user") or {}
            except NETWORK_ERRORS as exc:
                log.info("Slack users.info %s failed (%s); using the id as the name", user_id, exc)
                return user_id
            profile = user.get("profile") or {}
            self._names[user_id] = str(profile.get("display_name") or profile.get("real_name")
                                       or user.get("real_name") or user.get("name") or user_id)
        return self._names[user_id]

    async def download(self, file: dict[str, Any]) -> bytes:
        """The bytes of a shared file, fetched from its private URL with the bot token.

        The token is only ever sent to the API's own site (slack.com and its subdomains).
        """
        url = str(file.get("url_private_download") or file.get("url_private") or "")
        if not url or not _same_site(url, self.base_url):
            raise ValueError(f"no downloadable URL on the API's site for file {file.get('id')}")
        timeout = aiohttp.ClientTimeout(total=DOWNLOAD_TIMEOUT_S)
        headers = {"Authorization": f"Bearer {self._token}"}
        async with aiohttp.ClientSession(timeout=timeout) as session, session.get(
                url, headers=headers, proxy=self.web.proxy) as response:
            if response.status != 200:
                raise ValueError(f"download of file {file.get('id')} answered HTTP {response.status}")
            if response.content_type == "text/html" and file.get("mimetype") != "text/html":
                raise ValueError(f"download of file {file.get('id')} got a login page (missing files:read?)")
            return await response.read()


def _retry_after(headers: Any) -> float:
    """Seconds from a Retry-After header (Slack sends whole seconds); 1 when absent or odd."""
    try:
        return max(0.0, float((headers or {}).get("Retry-After", 1)))
    except (TypeError, ValueError):
        return 1.0


def _same_site(url: str, base_url: str) -> bool:
    """True when `url`'s host is the API host or a subdomain of its domain (files.slack.com)."""
    host, api_host = urlsplit(url).hostname or "", urlsplit(base_url).hostname or ""
    domain = api_host.split(".", 1)[1] if api_host.count(".") >= 2 and not api_host[0].isdigit() else api_host
    return host in (api_host, domain) or host.endswith("." + domain)
