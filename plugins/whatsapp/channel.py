"""The WhatsApp channel: webhook events in, Cloud API messages out, for one business phone number."""

from __future__ import annotations

import logging
import mimetypes
import os
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway import (
    ChannelContext,
    ChannelProfile,
    DeliveryError,
    DeliveryJournal,
    DeliveryRecord,
    IncomingPayload,
    OutgoingPayload,
    Part,
    RunThreads,
    Sink,
    audio_note,
    deliver_parts,
    now_ms,
    reply_parts,
)
from gateway.api import ConfigurationError
from plugins.whatsapp.cloud_api import CloudApi, GraphError
from plugins.whatsapp.media import captioned, media_kind
from plugins.whatsapp.webhook import InboundMessage, WebhookServer, parse_messages

log = logging.getLogger("switchyard.whatsapp")

CHANNEL_TYPE = "whatsapp"
TEXT_LIMIT = 4096
MAX_BUTTONS, TITLE_LIMIT, BODY_LIMIT = 3, 20, 1024  # interactive reply buttons: Meta's limits
DEFAULT_API_BASE_URL = "https://graph.facebook.com/v21.0"
DEFAULT_WEBHOOK_PORT = 8090
DEFAULT_WEBHOOK_PATH = "/whatsapp/webhook"
REMEMBERED = 2000  # recent message ids kept for de-duplication and typing


@dataclass(frozen=True)
class WhatsAppConfig:
    """A profile's settings with its secrets resolved from the environment."""

    phone_number_id: str
    token: str
    app_secret: str
    verify_token: str | None
    api_base_url: str
    webhook_listen: str
    webhook_port: int
    webhook_path: str

    @classmethod
    def from_profile(cls, profile: ChannelProfile) -> WhatsAppConfig:
        """Reads the profile; raises RuntimeError naming the missing key or environment variable."""
        phone_number_id = str(profile.option("phone_number_id") or "").strip()
        if not phone_number_id:
            raise RuntimeError(f"whatsapp profile {profile.id!r}: `phone_number_id` is required")
        verify_env = profile.option("verify_token_env")
        path = str(profile.option("webhook_path", DEFAULT_WEBHOOK_PATH))
        return cls(
            phone_number_id=phone_number_id,
            token=_secret(profile, "token_env", "the access token"),
            app_secret=_secret(profile, "app_secret_env", "the app secret that signs webhooks"),
            verify_token=_secret(profile, "verify_token_env", "the webhook verify token") if verify_env else None,
            api_base_url=str(profile.option("api_base_url", DEFAULT_API_BASE_URL)),
            webhook_listen=str(profile.option("webhook_listen", "127.0.0.1")),
            webhook_port=_port(profile),
            webhook_path=path if path.startswith("/") else f"/{path}",
        )


def _port(profile: ChannelProfile) -> int:
    """The webhook port of a profile, checked to be a number."""
    raw = profile.option("webhook_port", DEFAULT_WEBHOOK_PORT)
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise RuntimeError(f"whatsapp profile {profile.id!r}: `webhook_port` must be a number, not {raw!r}") from None


def _secret(profile: ChannelProfile, key: str, what: str) -> str:
    """The value of the environment variable a `*_env` key names; never part of an error message."""
    variable = profile.option(key)
    if not variable:
        raise ConfigurationError(f"whatsapp profile {profile.id!r}: `{key}` is required "
                           f"(the environment variable holding {what})")
    value = os.environ.get(str(variable), "").strip()
    if not value:
        raise ConfigurationError(f"whatsapp profile {profile.id!r}: environment variable {variable} "
                           f"({key}, {what}) is not set")
    return value


class WhatsAppChannel:
    """Receives messages through its own webhook server and answers through the Cloud API.

    conversationId is the sender's WhatsApp id (wa_id): WhatsApp chats with a business are
    one-to-one. A message quoting (replying to) a message sent for a workflow run carries that
    run's workflowRunId. A reply's buttons are interactive reply buttons when WhatsApp can show them
    (see `shows_buttons_of`), else a numbered list; a tap (button_reply) becomes a payload with `button`.
    """

    name = CHANNEL_TYPE
    shows_buttons = True

    def __init__(self, profile: ChannelProfile, context: ChannelContext):
        self.profile = profile
        self.profile_id = profile.id
        self.context = context
        self.access = context.access
        self.threads = RunThreads(context.home, profile.id)
        self.journal = DeliveryJournal(context.home, profile.id)
        self.config: WhatsAppConfig | None = None
        self.api: CloudApi | None = None
        self.webhook: WebhookServer | None = None
        self._sink: Sink | None = None
        self._own_ids: set[str] = set()
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._last_inbound: OrderedDict[str, str] = OrderedDict()

    @property
    def webhook_url(self) -> str:
        """The local URL the webhook server listens on (after start)."""
        assert self.webhook is not None, "the channel is not started"
        return self.webhook.url

    async def start(self, sink: Sink) -> None:
        """Reads the profile and secrets, checks the token, then opens the webhook endpoint."""
        config = WhatsAppConfig.from_profile(self.profile)
        for secret in (config.token, config.app_secret, config.verify_token):
            if secret:
                self.context.events.add_secret(secret)
        self.config, self._sink = config, sink
        self.api = CloudApi(config.api_base_url, config.phone_number_id, config.token)
        await self.api.open()
        try:
            await self._log_in(config)
            self.webhook = WebhookServer(
                config.webhook_listen, config.webhook_port, config.webhook_path, app_secret=config.app_secret,
                verify_token=config.verify_token, on_event=self._on_event, events=self.context.events,
                profile_id=self.profile_id)
            await self.webhook.start()
        except BaseException:
            await self.api.close()
            raise
        log.info("whatsapp profile %s listening on %s", self.profile_id, self.webhook.url)
        if config.verify_token is None:
            log.warning("whatsapp profile %s has no verify_token_env: Meta's webhook verification will be "
                        "refused until one is set", self.profile_id)

    async def _log_in(self, config: WhatsAppConfig) -> None:
        """Checks the token against the phone number; raises RuntimeError without the secret."""
        assert self.api is not None
        try:
            number = await self.api.phone_number()
        except GraphError as exc:
            reason = str(exc).replace(config.token, "***")
            variable = self.profile.option("token_env")
            raise RuntimeError(f"whatsapp login failed for phone_number_id {config.phone_number_id} "
                               f"(token from ${variable}): {reason}") from None
        display = "".join(ch for ch in str(number.get("display_phone_number", "")) if ch.isdigit())
        self._own_ids = {config.phone_number_id, *([display] if display else [])}

    async def stop(self) -> None:
        """Closes the webhook endpoint and the API session."""
        if self.webhook is not None:
            await self.webhook.stop()
        if self.api is not None:
            await self.api.close()

    # --- inbound ------------------------------------------------------------------------------

    async def _on_event(self, event: dict[str, Any]) -> None:
        """Queues every admitted user message of one webhook event (raises if one cannot be queued)."""
        assert self.config is not None
        for message in parse_messages(event):
            if message.phone_number_id and message.phone_number_id != self.config.phone_number_id:
                continue
            if message.sender_id in self._own_ids or message.message_id in self._seen:
                continue
            _remember(self._seen, message.message_id, None)  # claimed now: Meta may redeliver meanwhile
            try:
                await self._accept(message)
            except BaseException:
                self._seen.pop(message.message_id, None)
                raise

    async def _accept(self, message: InboundMessage) -> None:
        """Queues one message of an admitted sender (its media downloaded), or refuses it."""
        decision = self.access.check(message.sender_id, message.sender_name)
        if not decision.allowed:
            self._refuse(message, decision.reason, decision.reply)
            return
        run_id = self.threads.run_for(message.reply_to)
        if run_id:
            self.threads.remember(message.message_id, run_id)
        text, files, audio = message.text, [], []
        if message.media is not None:
            path = await self._download(message)
            if path is not None:
                files.append(str(path))
                if message.media.kind == "audio":  # voice notes too; the webhook gives no length
                    audio.append(audio_note(path, None, message.media.mime_type))
                text = f"{text}\n[file: {path}]" if text else f"[file: {path}]"
            else:
                text = f"{text}\n[attachment could not be downloaded]".strip()
        payload = IncomingPayload.model_validate({
            "channel": CHANNEL_TYPE, "channelProfileId": self.profile_id, "sender": message.sender_name,
            "senderId": message.sender_id, "message": text, "timestamp": message.timestamp_ms or now_ms(),
            "messageId": message.message_id, "conversationId": message.sender_id, "files": files,
            "workflowRunId": run_id, **({"button": message.button} if message.button else {}),
            **({"audio": audio} if audio else {}),
            **({"editOf": message.edit_of} if message.edit_of else {})})
        assert self._sink is not None
        await self._sink(payload)
        _remember(self._last_inbound, message.sender_id, message.message_id)

    def _refuse(self, message: InboundMessage, reason: str, reply: str | None) -> None:
        """Records a refused message and queues the reply the access policy has for the sender, if any."""
        self.context.events.emit("message.rejected", channel=CHANNEL_TYPE, profile=self.profile_id,
                                 conversation=message.sender_id, senderId=message.sender_id, reason=reason)
        if reply:
            self.context.outbox.write(OutgoingPayload(
                channel=CHANNEL_TYPE, channelProfileId=self.profile_id, sender=message.sender_name,
                senderId=message.sender_id, message=reply, originalMessage=message.text,
                timestamp=now_ms(), messageId=message.message_id, agent="switchyard",
                conversationId=message.sender_id))

    async def _download(self, message: InboundMessage) -> Path | None:
        """Saves a message's media under files/; None (logged) when it cannot be fetched."""
        media = message.media
        assert media is not None and self.api is not None
        try:
            data, mime = await self.api.download_media(media.media_id)
        except GraphError as exc:
            log.warning("whatsapp profile %s: media %s of %s not downloaded: %s",
                        self.profile_id, media.media_id, message.message_id, exc)
            return None
        name = media.filename or f"{media.kind}-{media.media_id}{_extension(media.mime_type or mime)}"
        return await self.context.save_attachment(name, data, conversation=message.sender_id)

    # --- outbound -----------------------------------------------------------------------------

    async def send(self, outgoing: OutgoingPayload) -> DeliveryRecord:
        """Delivers a reply part by part (text chunks, then each file as image, audio, video or document by its
        type, plugins.whatsapp.media; one file and a short text is one message, the text its caption), quoting the
        original message."""
        to = outgoing.conversationId or outgoing.senderId
        if not to:
            raise DeliveryError("the outgoing payload names no WhatsApp recipient (conversationId)")
        quote = outgoing.messageId if outgoing.messageId.startswith("wamid.") else None
        api = self._started_api()

        parts = reply_parts(outgoing, TEXT_LIMIT, shows_buttons=True)
        if not shows_buttons_of(parts):
            parts = reply_parts(outgoing, TEXT_LIMIT)
        parts = captioned(outgoing, parts)
        first = parts[0].index if parts else -1

        async def send_part(part: Part) -> str:
            """Sends one part; returns its wamid."""
            reply_to = quote if part.index == first else None
            if part.file is not None:
                data = await self.context.read_attachment(outgoing, part.file)
                media_id = await api.upload_media(part.file.name, data)
                kind = media_kind(part.file.name, len(data))
                wamid = await api.send_media(to, kind, media_id, part.file.name, caption=part.text or "",
                                             reply_to=reply_to)
            elif part.buttons:
                wamid = await api.send_buttons(to, part.text or "", part.buttons, reply_to=reply_to)
            else:
                wamid = await api.send_text(to, part.text or "", reply_to=reply_to)
            if outgoing.workflowRunId:
                self.threads.remember(wamid, outgoing.workflowRunId)
            return wamid

        return await deliver_parts(outgoing, parts, send_part, self.journal)

    async def typing(self, conversation: str) -> None:
        """Marks the conversation's latest message read with a typing indicator; failures are logged."""
        message_id = self._last_inbound.get(conversation)
        if message_id is None or self.api is None:
            return
        try:
            await self.api.mark_read_typing(message_id)
        except Exception as exc:
            log.warning("whatsapp profile %s: typing indicator failed: %s", self.profile_id, exc)

    def _started_api(self) -> CloudApi:
        """The API client, or DeliveryError before start."""
        if self.api is None:
            raise DeliveryError("the WhatsApp channel is not started")
        return self.api


def shows_buttons_of(parts: list[Part]) -> bool:
    """Whether WhatsApp can show the buttons riding on these parts as reply buttons: at most three, titles
    of at most 20 characters, on a text of at most 1,024 (else the reply shows them as a numbered list)."""
    for part in parts:
        if part.buttons and (len(part.buttons) > MAX_BUTTONS or len(part.text or "") > BODY_LIMIT
                             or any(len(button.label) > TITLE_LIMIT for button in part.buttons)):
            return False
    return True


def _remember(memory: OrderedDict[str, Any], key: str, value: Any) -> None:
    """Stores a key as the newest entry of a bounded memory."""
    memory[key] = value
    memory.move_to_end(key)
    while len(memory) > REMEMBERED:
        memory.popitem(last=False)


def _extension(mime: str | None) -> str:
    """A file extension for a MIME type (WhatsApp voice notes are `audio/ogg; codecs=opus`)."""
    if not mime:
        return ""
    return mimetypes.guess_extension(mime.split(";")[0].strip()) or ""
