"""The Discord channel object: login checks, a supervised gateway connection, resumable delivery."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import warnings
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

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
    Part,
    PermanentError,
    RunThreads,
    Sink,
    clip_note,
    deliver_note,
    deliver_parts,
    replacing_preview,
    reply_parts,
)
from plugins.discord import CHANNEL_TYPE
from plugins.discord.buttons import MAX_BUTTONS, buttons_view
from plugins.discord.errors import FAILURES, describe, failure, refusal
from plugins.discord.inbound import Intake

log = logging.getLogger("switchyard.discord")

TEXT_LIMIT = 2000
RATE_LIMIT_WAIT_MAX_S = 30.0  # discord.py waits out shorter 429s itself; longer ones raise RateLimited
UNKNOWN_MESSAGE = 10008  # Discord's error code for an edit of a message that was deleted

Target = discord.PartialMessageable | discord.DMChannel


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
        self._threads = RunThreads(context.home, profile.id)
        self._journal = DeliveryJournal(context.home, profile.id)
        self._notes = NoteMessages.kept_for(context.home, profile.id)
        self._intake = Intake(context, self._threads, require_mention=bool(profile.option("require_mention")))
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
        """Posts the text in chunks of ≤ 2000 characters, then the files, the first part as a reply; a
        progress note (`progressKey`) edits the message already showing that note, if any."""
        client = self._client
        if client is None or client.is_closed():
            raise DeliveryError(f"discord profile {self.profile_id!r} is not connected")
        target = await self._target(client, outgoing)
        reference = self._reference(outgoing, target.id)
        run_id = outgoing.workflowRunId

        async def send_part(part: Part) -> str:
            upload = await self._upload(outgoing, part.file) if part.file is not None else None
            message = await self._post(target, part, upload, reference if part.index == 0 else None)
            if run_id:
                self._threads.remember(str(message.id), run_id)
            return str(message.id)

        async def edit(message_id: str, text: str) -> bool:
            return await self._edit(target, message_id, text)

        if outgoing.progress_key and not outgoing.files:
            text = clip_note(outgoing.message, TEXT_LIMIT)
            return await deliver_note(outgoing, self._notes, text, lambda note: send_part(Part(0, text=note)), edit)
        parts = reply_parts(outgoing, TEXT_LIMIT, shows_buttons=len(outgoing.buttons) <= MAX_BUTTONS)
        record = await deliver_parts(outgoing, parts, replacing_preview(outgoing, self._notes, send_part, edit),
                                     self._journal)
        if run_id:
            self._remember_run(client, outgoing, target.id, run_id)
        return record

    def _remember_run(self, client: discord.Client, outgoing: OutgoingPayload, channel_id: int,
                      run_id: str) -> None:
        """Ties the user's message and, when the conversation is a thread, the thread to the run."""
        if outgoing.messageId.isdigit():
            self._threads.remember(outgoing.messageId, run_id)
        if isinstance(client.get_channel(channel_id), discord.Thread):
            self._threads.remember(str(channel_id), run_id)

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

    async def _target(self, client: discord.Client, outgoing: OutgoingPayload) -> Target:
        """The channel or thread of the conversation, else a DM with the sender."""
        conversation = outgoing.conversationId or ""
        if conversation.isdigit():
            return client.get_partial_messageable(int(conversation))
        sender = outgoing.senderId or ""
        if not sender.isdigit():
            raise DeliveryError("no Discord channel (conversationId) or user (senderId) to send to")
        try:
            return await client.create_dm(discord.Object(int(sender)))
        except (discord.Forbidden, discord.NotFound) as exc:  # no such user, or no DMs from this bot
            raise PermanentError(f"Discord refused a DM with user {sender}: {refusal(exc)}") from exc
        except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
            raise DeliveryError(f"cannot open a Discord DM with user {sender}: {exc}") from exc

    def _reference(self, outgoing: OutgoingPayload, channel_id: int) -> discord.MessageReference | None:
        """A reply reference to the user's message, unless it is known to be in another channel."""
        if not outgoing.messageId.isdigit():
            return None
        message_id = int(outgoing.messageId)
        seen_in = self._intake.channel_of(message_id)
        if seen_in is not None and seen_in != channel_id:
            return None
        return discord.MessageReference(message_id=message_id, channel_id=channel_id, fail_if_not_exists=False)

    async def _upload(self, outgoing: OutgoingPayload, path: Path) -> discord.File | None:
        """A file of the reply as an in-memory upload (read through the gateway), or None when it may not be sent."""
        try:
            data = await self._context.read_attachment(outgoing, path)
        except (PermanentError, DeliveryError) as exc:
            log.warning("discord: %s is not sent: %s", path, exc)
            return None
        return discord.File(io.BytesIO(data), filename=path.name)

    async def _post(self, target: Target, part: Part, upload: discord.File | None,
                    reference: discord.MessageReference | None) -> discord.Message:
        """Posts one part, turning platform failures into DeliveryError (with retry_after on 429), or
        PermanentError when Discord refuses it for good (403: no access or DMs closed, 404: channel gone)."""
        try:
            try:
                return await self._post_once(target, part, upload, reference)
            except discord.HTTPException as exc:
                if reference is None or exc.status != 400:
                    raise
                log.info("discord refused the reply reference (%s); posting without it", exc)
                return await self._post_once(target, part, _again(upload), None)
        except FAILURES as exc:
            raise failure(exc) from exc

    async def _edit(self, target: Target, message_id: str, text: str) -> bool:
        """Replaces the text of a message the bot posted; False when that message was deleted."""
        try:
            await target.get_partial_message(int(message_id)).edit(content=text)
        except discord.NotFound as exc:
            if exc.code == UNKNOWN_MESSAGE:
                return False
            raise failure(exc) from exc
        except FAILURES as exc:
            raise failure(exc) from exc
        return True

    async def _post_once(self, target: Target, part: Part, upload: discord.File | None,
                         reference: discord.MessageReference | None) -> discord.Message:
        replying: dict[str, Any] = {"reference": reference} if reference is not None else {}
        if part.file is None:
            if part.buttons:
                replying["view"] = buttons_view(part.buttons)
            return await target.send(part.text or "", **replying)
        if upload is None:
            return await target.send(f"[file not sent: {part.file.name} cannot be read]", **replying)
        return await target.send(file=upload, **replying)


def _again(upload: discord.File | None) -> discord.File | None:
    """The same upload, rewound for a second request."""
    if upload is not None:
        upload.reset()
    return upload
