"""How Slack events reach the channel: Socket Mode (a watched WebSocket) or the HTTP Events API (bolt)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from gateway.channelkit.backoff import delay as backoff_delay
from plugins.slack.client import NETWORK_ERRORS, sdk_logger

log = logging.getLogger("switchyard.slack")

EventHandler = Callable[[dict[str, Any]], Awaitable[None]]


def build_app(web_client: AsyncWebClient, on_message: EventHandler, on_tap: EventHandler,
              signing_secret: str | None) -> AsyncApp:
    """A bolt app that hands every `message` event to `on_message` and every tap on a button (a
    block_actions payload, acknowledged first: Slack wants the ack within 3 s) to `on_tap`; with a signing
    secret it checks each request's signature (HTTP mode), without one it trusts its Socket Mode connection."""
    app = AsyncApp(client=web_client, signing_secret=signing_secret or "", logger=sdk_logger(),
                   request_verification_enabled=signing_secret is not None)

    async def message(event: dict[str, Any]) -> None:
        await on_message(event)

    async def tap(ack: Callable[[], Awaitable[None]], body: dict[str, Any]) -> None:
        await ack()
        await on_tap(body)

    app.event("message")(message)
    app.action(re.compile(".+"))(tap)
    return app


class SocketTransport:
    """Socket Mode: one WebSocket opened with the app token, watched by a named task that reconnects
    with jittered exponential backoff when it drops (the SDK's own fixed-interval retry is off)."""

    watch_interval_s = 1.0
    reconnect_initial_s = 1.0
    reconnect_max_s = 60.0
    connect_timeout_s = 15.0
    ping_interval_s = 10.0

    def __init__(self, app: AsyncApp, app_token: str, *, token_env: str, name: str):
        self._app = app
        self._app_token = app_token
        self._token_env = token_env
        self._name = name
        self._handler: AsyncSocketModeHandler | None = None
        self._task: asyncio.Task[None] | None = None
        self.reconnects = 0

    async def start(self) -> None:
        """Opens the connection; raises RuntimeError (naming the variable, not the token) when refused."""
        self._handler = AsyncSocketModeHandler(self._app, self._app_token, logger=sdk_logger(),
                                               ping_interval=self.ping_interval_s)
        client = self._handler.client
        client.default_auto_reconnect_enabled = client.auto_reconnect_enabled = False
        try:
            client.wss_uri = await client.issue_new_wss_url()
            await asyncio.wait_for(client.connect(), timeout=self.connect_timeout_s)  # type: ignore[no-untyped-call]
        except SlackApiError as exc:
            await self.stop()
            raise RuntimeError(f"Slack rejected the app token from ${self._token_env}: "
                               f"{exc.response.get('error') or exc.response.status_code}") from None
        except (*NETWORK_ERRORS, TimeoutError) as exc:
            await self.stop()
            raise RuntimeError(f"cannot open the Slack Socket Mode connection: {type(exc).__name__}: {exc}") from None
        self._task = asyncio.create_task(self._watch(), name=f"slack:{self._name}:socket-watch")

    async def _watch(self) -> None:
        """Checks the connection every `watch_interval_s` and reconnects it when it is gone."""
        attempt = 0
        while True:
            await asyncio.sleep(self.watch_interval_s)
            try:
                await self._reconnect_if_lost(attempt)
            except Exception as exc:  # a failed attempt is retried with a longer backoff, never fatal
                attempt += 1
                log.warning("slack %s: reconnect failed: %s: %s", self._name, type(exc).__name__, exc)
            else:
                attempt = 0

    async def _reconnect_if_lost(self, attempt: int) -> None:
        """Reconnects, after a jittered backoff growing with `attempt`, when the connection is gone."""
        assert self._handler is not None
        client = self._handler.client
        if await client.is_connected():
            return
        delay = backoff_delay(attempt + 1, self.reconnect_initial_s, self.reconnect_max_s, jitter=(0.5, 1.0))
        log.warning("slack %s: Socket Mode connection lost; reconnecting in %.2fs", self._name, delay)
        await asyncio.sleep(delay)
        client.wss_uri = await client.issue_new_wss_url()
        await asyncio.wait_for(client.connect(), timeout=self.connect_timeout_s)  # type: ignore[no-untyped-call]
        self.reconnects += 1
        log.info("slack %s: Socket Mode connection restored", self._name)

    async def stop(self) -> None:
        """Stops watching and closes the connection and its HTTP session."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._handler is not None:
            await self._handler.close_async()  # type: ignore[no-untyped-call]
            self._handler = None
            await asyncio.sleep(0)  # lets the SDK's cancelled reader tasks finish


class HttpTransport:
    """The HTTP Events API: bolt's aiohttp adapter served on our own aiohttp site.

    Bolt verifies `X-Slack-Signature` (401 when wrong), answers url_verification, acknowledges
    with 200 and runs the listener afterwards.
    """

    def __init__(self, app: AsyncApp, *, host: str, port: int, path: str):
        self._app = app
        self.host = host
        self.port = port
        self.path = path
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        """Starts listening; raises RuntimeError when the address cannot be bound."""
        web_app = web.Application()
        web_app.router.add_post(self.path, self._handle)
        self._runner = web.AppRunner(web_app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        try:
            await site.start()
        except OSError as exc:
            await self.stop()
            raise RuntimeError(f"cannot listen for Slack events on {self.host}:{self.port}: {exc.strerror}") from None
        self.port = int(self._runner.addresses[0][1])

    @property
    def url(self) -> str:
        """The events URL this listener serves (what the Slack app's Request URL must reach)."""
        return f"http://{self.host}:{self.port}{self.path}"

    async def _handle(self, request: web.Request) -> web.Response:
        response = await self._app.async_dispatch(await to_bolt_request(request))
        return await to_aiohttp_response(response)

    async def stop(self) -> None:
        """Stops listening."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
