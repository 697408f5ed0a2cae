"""The Telegram channel: python-telegram-bot's Application, run inside the gateway's event loop (replies are
sent by plugins/telegram/outbound.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from gateway import (
    ChannelContext,
    DeliveryError,
    DeliveryJournal,
    DeliveryRecord,
    NoteMessages,
    OutgoingPayload,
    RunThreads,
    Sink,
)
from gateway.api import INTAKE_FAILED_REPLY, ConfigurationError
from gateway.channelkit.backoff import delay as backoff_delay
from plugins.telegram.inbound import InboundMessages
from plugins.telegram.options import CHANNEL_TYPE, TelegramOptions
from plugins.telegram.outbound import Poster
from plugins.telegram.profile import TelegramProfileOptions
from plugins.telegram.redaction import TokenFilter
from plugins.telegram.refs import Target

if TYPE_CHECKING:
    from telegram import Bot, Update
    from telegram.error import TelegramError
    from telegram.ext import Application

    TelegramApp = Application[Any, Any, Any, Any, Any, Any]

log = logging.getLogger("switchyard.telegram")

ALLOWED_UPDATES = ["message", "edited_message", "callback_query"]  # messages, their edits, taps on buttons


class TelegramChannel:
    """One bot account: receives updates by long polling or webhook and sends replies.

    Polling failures are reported by python-telegram-bot's error callback; a named supervisor
    task then restarts polling with jittered exponential backoff until it works again. Progress
    notes and streamed answers' previews are edited in place (editMessageText), a preview into the final
    answer's first part. A reply's buttons are an inline keyboard under its last text chunk; a tap
    (callback_query) comes in as a payload with `button` (plugins.telegram.inbound).
    """

    name = CHANNEL_TYPE
    edits_progress = True
    shows_buttons = True
    edit_interval_sec = 1.0
    """Telegram's Bot FAQ: "In a single chat, avoid sending more than one message per second", and in a group
    no more than 20 messages a minute (https://core.telegram.org/bots/faq#my-bot-is-hitting-limits-how-do-i-
    avoid-this). An edit is a call on that chat too; a 429 is still waited out (outbound.Poster)."""
    group_edit_interval_sec = 3.0

    def edit_interval_for(self, conversation: str) -> float:
        """The FAQ's pace for this chat: a group's (its id is negative) or a private chat's."""
        return self.group_edit_interval_sec if conversation.startswith("-") else self.edit_interval_sec

    def __init__(self, options: TelegramOptions, context: ChannelContext):
        self.profile_id = options.profile_id
        self.options = options
        self.context = context
        self.threads = RunThreads(context.home, options.profile_id)
        self._poster = Poster(context, self.threads, DeliveryJournal(context.home, options.profile_id),
                              NoteMessages.kept_for(context.home, options.profile_id), self._scrub)
        self._token = ""
        self._app: TelegramApp | None = None
        self._inbound: InboundMessages | None = None
        self._log_filter: TokenFilter | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._trouble = asyncio.Event()
        self._last_error: BaseException | None = None

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self, sink: Sink) -> None:
        self._token = self.options.token()
        secret = self.options.webhook_secret()
        for value in (self._token, secret):
            if value:
                self.context.events.add_secret(value)
        _import_library()
        self._log_filter = TokenFilter(self._token)
        self._log_filter.install()  # before building: the Bot logs its URL, token included, at DEBUG
        app = _build_application(self.options, self._token)
        from plugins.telegram.groups import ChatAdministrators

        self._inbound = InboundMessages(self.context, self.threads, sink, ChatAdministrators(app.bot, self.context))
        from telegram import Update
        from telegram.ext import TypeHandler

        app.add_handler(TypeHandler(Update, self._on_update))
        try:
            await self._login(app)
            await app.start()
            await self._start_updates(app, secret)
        except BaseException:
            await self._shutdown(app)
            self._log_filter.remove()
            raise
        self._app = app
        if self.options.mode == "webhook" and secret is None:
            log.warning("telegram %s: webhook without webhook_secret_env accepts updates from anyone who "
                        "knows its URL", self.profile_id)
        if self.options.mode == "polling":
            self._supervisor = asyncio.create_task(self._supervise(), name=f"telegram:{self.profile_id}:reconnect")
        log.info("telegram %s: connected as @%s (%s)", self.profile_id, app.bot.username, self.options.mode)

    async def _login(self, app: TelegramApp) -> None:
        """Checks the token with getMe; errors name the variable and the server, never the token."""
        from telegram.error import InvalidToken, TelegramError

        where = f"the Bot API at {self.options.base_url}"
        try:
            await app.initialize()
        except InvalidToken:  # 401 (or 404: a malformed token): retrying the same token cannot help
            raise ConfigurationError(f"telegram profile {self.profile_id!r}: {where} rejected the bot token "
                                     f"in {self.options.token_env} (401 Unauthorized); set a valid token and "
                                     "restart") from None
        except TelegramError as exc:
            raise RuntimeError(f"telegram profile {self.profile_id!r}: cannot log in to {where}: "
                               f"{self._scrub(exc)}") from None

    async def _start_updates(self, app: TelegramApp, secret: str | None) -> None:
        """Starts long polling, or the webhook server after registering its URL with setWebhook."""
        from telegram.error import TelegramError

        updater = app.updater
        assert updater is not None
        try:
            if self.options.mode == "webhook":
                await updater.start_webhook(
                    listen=self.options.webhook_listen, port=self.options.webhook_port,
                    url_path=self.options.webhook_path, webhook_url=self.options.webhook_url,
                    secret_token=secret, allowed_updates=ALLOWED_UPDATES)
            else:
                await updater.start_polling(
                    timeout=timedelta(seconds=self.options.poll_timeout_sec),
                    allowed_updates=ALLOWED_UPDATES, error_callback=self._on_poll_error)
        except (TelegramError, OSError) as exc:
            raise RuntimeError(f"telegram profile {self.profile_id!r}: cannot start receiving updates "
                               f"({self.options.mode}): {self._scrub(exc)}") from None

    async def stop(self) -> None:
        if self._supervisor is not None:
            self._supervisor.cancel()
            await asyncio.gather(self._supervisor, return_exceptions=True)
            self._supervisor = None
        if self._app is not None:
            await self._shutdown(self._app)
            self._app = None
        if self._log_filter is not None:
            self._log_filter.remove()
            self._log_filter = None

    async def _shutdown(self, app: TelegramApp) -> None:
        """Stops updates, update processing and the HTTP clients, logging (not raising) failures."""
        try:
            if app.updater is not None and app.updater.running:
                await app.updater.stop()
            if app.running:
                await app.stop()
            await app.shutdown()
            await app.bot.shutdown()  # a failed login leaves the HTTP clients open
        except Exception as exc:
            log.warning("telegram %s: unclean shutdown: %s", self.profile_id, self._scrub(exc))

    # --- reconnecting -----------------------------------------------------------------------

    def _on_poll_error(self, exc: TelegramError) -> None:
        """python-telegram-bot's polling error callback (synchronous, must not raise)."""
        self._last_error = exc
        self._trouble.set()

    async def _supervise(self) -> None:
        """Restarts polling after each failure, with jittered exponential backoff."""
        failures, recovered_at = 0, 0.0
        while True:
            await self._trouble.wait()
            if time.monotonic() - recovered_at > self.options.reconnect_max_sec:
                failures = 0
            assert self._app is not None and self._app.updater is not None
            if self._app.updater.running:
                try:
                    await self._app.updater.stop()
                except Exception as exc:
                    log.debug("telegram %s: stopping the failed poller: %s", self.profile_id, self._scrub(exc))
            self._trouble.clear()
            while True:
                failures += 1
                await self._back_off(failures)
                try:
                    await self._start_updates(self._app, None)
                    break
                except Exception as exc:
                    self._last_error = exc
            recovered_at = time.monotonic()
            log.info("telegram %s: receiving updates again", self.profile_id)
            self.context.events.emit("channel.reconnected", channel=CHANNEL_TYPE, profile=self.profile_id,
                                     attempt=failures)

    async def _back_off(self, failures: int) -> None:
        """Waits before reconnect attempt number `failures` (doubling, capped, jittered)."""
        delay = backoff_delay(failures, self.options.reconnect_initial_sec, self.options.reconnect_max_sec,
                              jitter=(0.5, 1.0))
        reason = self._scrub(self._last_error) if self._last_error else "unknown error"
        log.warning("telegram %s: receiving updates failed (%s); reconnecting in %.1fs",
                    self.profile_id, reason, delay)
        self.context.events.emit("channel.reconnecting", channel=CHANNEL_TYPE, profile=self.profile_id,
                                 attempt=failures, delay_ms=int(delay * 1000), reason=reason)
        await asyncio.sleep(delay)

    # --- inbound ----------------------------------------------------------------------------

    async def _on_update(self, update: Update, _context: object) -> None:
        """Handles one update from the Application (updates are processed one at a time)."""
        if update.callback_query is not None and self._inbound is not None:
            await self._inbound.tap(update.callback_query)
            return
        message = update.message or update.edited_message
        if message is None or self._inbound is None:
            return
        try:
            await self._inbound.handle(update.get_bot(), message, edited=update.message is None)
        except Exception as exc:  # Telegram will not send the update again: tell the sender
            log.exception("telegram %s: could not enqueue message %s", self.profile_id, message.message_id)
            self.context.events.emit("channel.error", channel=CHANNEL_TYPE, profile=self.profile_id,
                                     reason=self._scrub(exc))
            try:
                await message.reply_text(INTAKE_FAILED_REPLY)
            except Exception as reply_exc:
                log.warning("telegram %s: could not tell the sender either: %s", self.profile_id,
                            self._scrub(reply_exc))

    # --- outbound ---------------------------------------------------------------------------

    async def send(self, outgoing: OutgoingPayload) -> DeliveryRecord:
        """Sends the reply through the connected bot (plugins/telegram/outbound.py)."""
        return await self._poster.send(self._bot(), outgoing)

    async def typing(self, conversation: str) -> None:
        """Shows "typing…" in the conversation (Telegram shows it for ~5 s); failures are logged."""
        from telegram.constants import ChatAction

        try:
            target = Target.parse(conversation)
            await self._bot().send_chat_action(target.chat, ChatAction.TYPING, message_thread_id=target.topic)
        except Exception as exc:
            log.warning("telegram %s: typing indicator for %s failed: %s", self.profile_id, conversation,
                        self._scrub(exc))

    def _bot(self) -> Bot:
        if self._app is None:
            raise DeliveryError(f"telegram profile {self.profile_id!r} is not connected")
        bot: Bot = self._app.bot
        return bot

    def _scrub(self, exc: BaseException | str) -> str:
        text = str(exc) or type(exc).__name__
        return text.replace(self._token, "***") if self._token else text


def _import_library() -> None:
    """Imports python-telegram-bot (only when a telegram profile starts)."""
    problem = TelegramProfileOptions.unavailable()
    if problem is not None:
        raise ConfigurationError(problem)


def _build_application(options: TelegramOptions, token: str) -> TelegramApp:
    """The Application for this bot, pointed at the configured Bot API (no job queue)."""
    from telegram.ext import ApplicationBuilder

    return (ApplicationBuilder().token(token).base_url(options.base_url)
            .base_file_url(options.base_file_url).job_queue(None).build())
