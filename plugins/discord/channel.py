"""The Discord channel object: login checks and a supervised gateway connection; replies are posted by
plugins/discord/outbound.py."""

from __future__ import annotations

import asyncio
import logging
import os
import warnings
from collections.abc import Awaitable

import aiohttp
import yarl

from gateway.api import ConfigurationError
from gateway.channelkit.backoff import delay as backoff_delay
from plugins.discord.profile import LIBRARY_MISSING

try:
    with warnings.catch_warnings():
        # discord.py imports the deprecated `audioop` for voice, which this channel never uses.
        warnings.filterwarnings("ignore", "'audioop' is deprecated", DeprecationWarning)
        import discord
        import discord.gateway
        import discord.http
except ImportError as exc:  # the same imports as DiscordProfileOptions.unavailable, which `check` asks
    raise ConfigurationError(LIBRARY_MISSING) from exc

from gateway import (
    ChannelContext,
    ChannelProfile,
    DeliveryError,
    DeliveryJournal,
    DeliveryRecord,
    NoteMessages,
    OutgoingPayload,
    RunThreads,
    Sink,
)
from plugins.discord import CHANNEL_TYPE
from plugins.discord.errors import describe
from plugins.discord.inbound import Intake
from plugins.discord.outbound import Poster

log = logging.getLogger("switchyard.discord")

RATE_LIMIT_WAIT_MAX_S = 30.0  # discord.py waits out shorter 429s itself; longer ones raise RateLimited


class DiscordChannel:
    """One Discord bot: turns its messages into incoming payloads and posts replies as the bot.

    Progress notes and streamed answers' previews are edited in place (PATCH /channels/{id}/messages/{id}),
    a preview into the final answer's first part. A reply's buttons are message components under its last
    chunk; a tap arrives as an interaction, handled by its custom_id (the button id) whenever it comes,
    before or after a restart.
    """

    name = CHANNEL_TYPE
    edits_progress = True
    shows_buttons = True
    edit_interval_sec = 1.0
    """Discord publishes no fixed figure: limits are per route and channel, "should not be hard coded", and come
    in each response's headers (https://discord.com/developers/docs/topics/rate-limits), which discord.py
    obeys, waiting out a 429. One edit of a stream a second keeps those waits rare."""
    login_timeout_s = 30.0
    ready_timeout_s = 10.0
    reconnect_initial_s = 1.0
    reconnect_max_s = 300.0
    typing_timeout_s = 10.0
    stop_timeout_s = 5.0

    def __init__(self, profile: ChannelProfile, context: ChannelContext):
        self.profile_id = profile.id
        self._context = context
        self._token_env = str(profile.option("token_env") or "")
        self._api_base_url = profile.option("api_base_url")
        self._gateway_url = profile.option("gateway_url")
        threads = RunThreads(context.home, profile.id)
        self._intake = Intake(context, threads, require_mention=bool(profile.option("require_mention")))
        self._poster = Poster(context, threads, DeliveryJournal(context.home, profile.id),
                              NoteMessages.kept_for(context.home, profile.id), self._intake)
        self._client: discord.Client | None = None
        self._sink: Sink | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self._handlers: set[asyncio.Task[object]] = set()
        self._started = False
        self._stopping = False
        self._failures = 0

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self, sink: Sink) -> None:
        """Logs in over REST, then connects to the gateway; raises when either is refused."""
        token = self._token()
        self._sink = sink
        self._point_at_servers()
        client = self._new_client()
        await self._login(client, token)
        self._client = client
        self._supervisor = asyncio.create_task(self._supervise(client, token),
                                               name=f"discord:{self.profile_id}:gateway")
        self._supervisor.add_done_callback(self._supervisor_ended)
        connected = asyncio.create_task(self._connected.wait(), name=f"discord:{self.profile_id}:ready")
        try:
            await asyncio.wait({self._supervisor, connected}, timeout=self.ready_timeout_s,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            connected.cancel()
        if self._supervisor.done():
            await client.close()
            reason = describe(self._supervisor.exception(), self._token_env)
            raise RuntimeError(f"discord profile {self.profile_id!r}: the gateway refused the bot: {reason}")
        if not self._connected.is_set():
            log.warning("discord profile %s: gateway not connected after %.0fs; still trying",
                        self.profile_id, self.ready_timeout_s)
        self._started = True

    async def stop(self) -> None:
        """Lets messages being taken in finish, then closes the connection."""
        self._stopping = True
        if self._handlers:
            await asyncio.wait(set(self._handlers), timeout=self.stop_timeout_s)
        if self._client is not None:
            await self._client.close()
        if self._supervisor is not None:
            await asyncio.wait({self._supervisor}, timeout=self.stop_timeout_s)
            self._supervisor.cancel()
            await asyncio.gather(self._supervisor, return_exceptions=True)

    def _supervisor_ended(self, task: asyncio.Task[None]) -> None:
        if self._started and not task.cancelled() and task.exception() is not None:
            log.error("discord profile %s: the connection supervisor died; no more messages will arrive",
                      self.profile_id, exc_info=task.exception())

    def _token(self) -> str:
        if not self._token_env:
            raise ConfigurationError(f"discord profile {self.profile_id!r}: set token_env to the name of the "
                               "environment variable that holds the bot token")
        token = os.environ.get(self._token_env, "").strip()
        if not token:
            raise ConfigurationError(f"discord profile {self.profile_id!r}: environment variable "
                               f"{self._token_env} is not set (it must hold the bot token)")
        return token

    def _point_at_servers(self) -> None:
        """Applies the configured URLs (process-wide in discord.py: shared by every Discord profile)."""
        if self._api_base_url:
            discord.http.Route.BASE = str(self._api_base_url).rstrip("/")
        if self._gateway_url:
            discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(str(self._gateway_url))

    def _new_client(self) -> discord.Client:
        intents = discord.Intents.default()
        intents.message_content = True
        client = discord.Client(intents=intents, max_ratelimit_timeout=RATE_LIMIT_WAIT_MAX_S,
                                allowed_mentions=discord.AllowedMentions(everyone=False, roles=False))

        async def on_connect() -> None:
            self._connected.set()
            self._failures = 0

        async def on_resumed() -> None:
            self._failures = 0

        async def on_message(message: discord.Message) -> None:
            await self._take_in(client, message)

        async def on_raw_message_edit(event: discord.RawMessageUpdateEvent) -> None:
            if event.message.edited_at is not None:  # (an embed unfurled is an update, not an edit)
                await self._take_in(client, event.message, edited=True)

        async def on_interaction(interaction: discord.Interaction) -> None:
            if interaction.type is discord.InteractionType.component and self._sink is not None:
                await self._tracked(self._intake.tap(interaction, self._sink), f"interaction {interaction.id}")

        for handler in (on_connect, on_resumed, on_message, on_raw_message_edit, on_interaction):
            client.event(handler)
        return client

    async def _login(self, client: discord.Client, token: str) -> None:
        """Checks the token over REST (GET /users/@me); closes the client and raises when refused."""
        try:
            await asyncio.wait_for(client.login(token), self.login_timeout_s)
        except discord.LoginFailure:  # 401: retrying the same token cannot help
            await client.close()
            raise ConfigurationError(f"discord profile {self.profile_id!r}: login failed: Discord rejected the "
                                     f"token in {self._token_env} (401 Unauthorized); set a valid token and "
                                     "restart") from None
        except (discord.HTTPException, aiohttp.ClientError, OSError, TimeoutError) as exc:
            await client.close()
            raise RuntimeError(f"discord profile {self.profile_id!r}: login failed: "
                               f"{describe(exc, self._token_env)}") from None

    # --- connection supervision ----------------------------------------------------------------

    async def _supervise(self, client: discord.Client, token: str) -> None:
        """Keeps the gateway connected: discord.py resumes blips itself; this restarts what it gives up on."""
        while not self._stopping:
            try:
                await client.connect(reconnect=True)
                reason = "the gateway connection ended"
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not self._started:
                    raise
                reason = describe(exc, self._token_env)
            await client.close()
            if self._stopping:
                return
            client = await self._relogin(token, reason)

    async def _relogin(self, token: str, reason: str) -> discord.Client:
        """Waits a jittered, growing delay and logs in with a fresh client until that succeeds."""
        while True:
            self._failures += 1
            delay = backoff_delay(self._failures, self.reconnect_initial_s, self.reconnect_max_s, jitter=(0.5, 1.0))
            log.warning("discord profile %s disconnected (%s); reconnecting in %.1fs", self.profile_id,
                        reason, delay)
            self._context.events.emit("channel.reconnecting", channel=CHANNEL_TYPE, profile=self.profile_id,
                                      reason=reason, attempt=self._failures, backoff_ms=int(delay * 1000))
            await asyncio.sleep(delay)
            client = self._new_client()
            try:
                await self._login(client, token)
            except asyncio.CancelledError:
                await client.close()
                raise
            except Exception as exc:
                await client.close()
                reason = str(exc) or type(exc).__name__
                continue
            self._client = client
            return client

    async def _take_in(self, client: discord.Client, message: discord.Message, *, edited: bool = False) -> None:
        """Runs the intake for one message (or an edit of one), tracked so that stop() can let it finish."""
        if client.user is not None and self._sink is not None:
            await self._tracked(self._intake.receive(message, client.user, self._sink, edited=edited),
                                f"message {message.id}")

    async def _tracked(self, intake: Awaitable[None], what: str) -> None:
        """Runs one intake in the event's task, tracked so that stop() can let it finish; failures are logged."""
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            await intake
        except Exception:
            log.exception("discord profile %s: %s could not be taken in", self.profile_id, what)
        finally:
            if task is not None:
                self._handlers.discard(task)

    # --- outbound ---------------------------------------------------------------------------------

    async def send(self, outgoing: OutgoingPayload) -> DeliveryRecord:
        """Posts the reply through the connected client (plugins/discord/outbound.py)."""
        client = self._client
        if client is None or client.is_closed():
            raise DeliveryError(f"discord profile {self.profile_id!r} is not connected")
        return await self._poster.send(client, outgoing)

    async def typing(self, conversation: str) -> None:
        """Shows "bot is typing…" in the conversation once (POST /channels/{id}/typing); never raises."""
        client = self._client
        if client is None or client.is_closed() or not conversation.isdigit():
            return
        channel = client.get_partial_messageable(int(conversation))

        async def trigger() -> None:
            await channel.typing()

        try:
            await asyncio.wait_for(trigger(), self.typing_timeout_s)
        except Exception as exc:
            log.warning("discord profile %s: typing indicator in %s failed: %s", self.profile_id,
                        conversation, exc)
