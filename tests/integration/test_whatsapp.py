"""The WhatsApp channel against a fake Cloud API: the conformance kit, then WhatsApp's own behaviour."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from gateway import (
    ChannelContext,
    ChannelProfile,
    DeliveryError,
    EventLog,
    Home,
    IncomingPayload,
    OutgoingPayload,
    PermanentError,
    Settings,
)
from gateway.outbox import FileOutbox
from gateway.plugin_manager import build_plugin_manager
from gateway.telemetry.events import read_events
from gateway.testing import async_wait_until
from gateway.testing.conformance import ChannelConformance, ChannelDriver, ChannelRig, SentItem, reply
from gateway.testing.conformance_edits import EditConformance
from plugins.whatsapp.channel import WhatsAppChannel
from tests.fakes.audio import seconds_of
from tests.fakes.whatsapp_server import FakeWhatsApp
from tests.integration.voice_notes import SPOKEN, queued_voice, transcribed, voice_bytes

pytestmark = pytest.mark.timeout(60)

TOKEN_ENV = "SWITCHYARD_TEST_WHATSAPP_TOKEN"
APP_SECRET_ENV = "SWITCHYARD_TEST_WHATSAPP_APP_SECRET"
VERIFY_TOKEN_ENV = "SWITCHYARD_TEST_WHATSAPP_VERIFY_TOKEN"


class WhatsAppDriver(ChannelDriver):
    """Drives the fake Cloud API; inbound messages are signed webhook posts to the latest channel."""

    type = "whatsapp"
    limit = 4096
    conversation = "15557654321"
    redelivers_refused_messages = True  # the webhook answers 500 and Meta sends it again
    supports_buttons = True
    supports_edits = True

    def __init__(self, server: FakeWhatsApp):
        self.server = server
        self.options: dict[str, Any] = {}
        self.channels: list[WhatsAppChannel] = []
        self.written: dict[str, str] = {}  # each sender's latest wamid

    def profile_options(self) -> dict[str, Any]:
        return {"token_env": TOKEN_ENV, "phone_number_id": self.server.phone_number_id,
                "app_secret_env": APP_SECRET_ENV, "verify_token_env": VERIFY_TOKEN_ENV,
                "api_base_url": self.server.api_base_url, "webhook_port": 0, **self.options}

    def build_channel(self, profile: ChannelProfile, context: ChannelContext) -> WhatsAppChannel:
        channel = super().build_channel(profile, context)
        assert isinstance(channel, WhatsAppChannel)
        self.channels.append(channel)
        return channel

    def point_webhook(self) -> None:
        self.server.webhook_url = self.channels[-1].webhook_url

    async def user_says(self, text: str, *, sender_id: str = "1001", sender: str = "Ada",
                        file: tuple[str, bytes] | None = None) -> None:
        self.point_webhook()
        self.written[sender_id] = await self.server.user_says(text, sender_id=sender_id, sender=sender, file=file)

    async def user_edits_last(self, text: str, *, sender_id: str = "1001", sender: str = "Ada") -> dict[str, Any]:
        edit = {"message": self.server.edit(self.written[sender_id], text, sender_id=sender_id), "sender": sender}
        await self.edit_again(edit)
        return edit

    async def edit_again(self, edit: Any) -> None:
        self.point_webhook()
        status = await self.server.post_event(self.server.event([edit["message"]],
                                                                names={edit["message"]["from"]: edit["sender"]}))
        assert status == 200, f"webhook answered {status}"

    async def bot_says(self, text: str) -> None:
        self.point_webhook()
        await self.server.bot_says(text)

    def sent(self) -> list[SentItem]:
        return list(self.server.recorded.sent)

    async def user_taps(self, button_id: str, *, sender_id: str = "1001", sender: str = "Ada") -> dict[str, Any]:
        tap = self.server.button_reply(button_id, sender_id=sender_id, shown_to=self.conversation)
        await self.tap_again({"message": tap, "sender": sender})
        return {"message": tap, "sender": sender}

    async def tap_again(self, tap: Any) -> None:
        self.point_webhook()
        message = tap["message"]
        status = await self.server.post_event(self.server.event([message], names={message["from"]: tap["sender"]}))
        assert status == 200, f"webhook answered {status}"

    def rate_limit_next(self, times: int, retry_after: float) -> None:
        self.server.rate_limit_next(times, retry_after)

    def fail_next(self, times: int, after: int = 0) -> None:
        self.server.fail_next(times, after)

    def refuse_next(self) -> None:
        self.server.refuse_next()


@pytest.fixture
async def server(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeWhatsApp]:
    async with FakeWhatsApp() as fake:
        assert isinstance(fake, FakeWhatsApp)
        monkeypatch.setenv(TOKEN_ENV, fake.token)
        monkeypatch.setenv(APP_SECRET_ENV, fake.app_secret)
        monkeypatch.setenv(VERIFY_TOKEN_ENV, fake.verify_token)
        yield fake


@pytest.fixture
async def driver(server: FakeWhatsApp) -> WhatsAppDriver:
    return WhatsAppDriver(server)


class TestWhatsAppConformance(ChannelConformance, EditConformance):
    """Every conformance check, against the fake Cloud API (the `driver` fixture above)."""


@asynccontextmanager
async def running(driver: WhatsAppDriver, root: Path, **options: Any) -> AsyncIterator[ChannelRig]:
    """A started WhatsApp channel in a throwaway home, its webhook known to the fake."""
    allow_from = options.pop("allow_from", None)
    driver.options.update(options)
    rig = ChannelRig(driver, root, allow_from=allow_from)
    await rig.start()
    driver.point_webhook()
    try:
        yield rig
    finally:
        await rig.stop()


def channel_of(rig: ChannelRig) -> WhatsAppChannel:
    assert isinstance(rig.channel, WhatsAppChannel)
    return rig.channel


async def test_the_plugin_declares_the_whatsapp_type() -> None:
    types = build_plugin_manager().hook.switchyard_channel_types()
    assert ["whatsapp"] in types


async def test_webhook_verification_echoes_the_challenge_only_for_the_right_token(
        driver: WhatsAppDriver, server: FakeWhatsApp, tmp_path: Path) -> None:
    async with running(driver, tmp_path / "home"):
        assert await server.verify(token=server.verify_token, challenge="8123") == (200, "8123")
        status, body = await server.verify(token="not-the-token", challenge="8123")
        assert status == 403 and "8123" not in body
        assert (await server.verify(token=server.verify_token, mode="unsubscribe"))[0] == 403


async def test_unsigned_or_forged_events_are_refused_and_not_queued(
        driver: WhatsAppDriver, server: FakeWhatsApp, tmp_path: Path) -> None:
    async with running(driver, tmp_path / "home") as rig:
        event = server.event([server.message("forged")])
        assert await server.post_event(event, signed=False) == 401
        assert await server.post_event(event, signature_override="sha256=" + "0" * 64) == 403
        await server.user_says("genuine")
        assert [p["message"] for p in rig.incoming()] == ["genuine"]
        assert rig.context is not None
        rejected = [e for e in read_events(rig.context.home.events_file) if e["event"] == "webhook.rejected"]
        assert len(rejected) == 2


async def test_the_payload_maps_the_sender_and_conversation_to_the_wa_id(
        driver: WhatsAppDriver, server: FakeWhatsApp, tmp_path: Path) -> None:
    async with running(driver, tmp_path / "home") as rig:
        wamid = await server.user_says("hola", sender_id="34600111222", sender="Lucía")
        (payload,) = rig.incoming()
        assert payload["messageId"] == wamid
        assert payload["senderId"] == payload["conversationId"] == "34600111222"
        assert payload["sender"] == "Lucía"
        assert "workflowRunId" not in payload


async def test_a_reply_to_a_run_message_carries_the_workflow_run_id(
        driver: WhatsAppDriver, server: FakeWhatsApp, tmp_path: Path) -> None:
    async with running(driver, tmp_path / "home") as rig:
        record = await channel_of(rig).send(
            reply("Build started", "15551234567", channel="whatsapp", workflowRunId="run-42"))
        (run_message,) = record.platform_ids
        await server.user_says("how is it going?", sender_id="15551234567", reply_to=run_message)
        await server.user_says("unrelated", sender_id="15551234567")
        payloads = rig.incoming()
        assert [(p["message"], p.get("workflowRunId")) for p in payloads] == [
            ("how is it going?", "run-42"), ("unrelated", None)]


async def test_the_first_part_of_a_reply_quotes_the_original_message(
        driver: WhatsAppDriver, server: FakeWhatsApp, tmp_path: Path) -> None:
    async with running(driver, tmp_path / "home") as rig:
        wamid = await server.user_says("tell me a long story", sender_id="15551234567")
        incoming = rig.incoming()[0]
        story = "\n\n".join(f"chapter {i} " + "y" * 3000 for i in range(2))
        outgoing = reply(story, incoming["conversationId"], channel="whatsapp").model_copy(
            update={"messageId": wamid})
        await channel_of(rig).send(outgoing)
        first, second = server.recorded.messages
        assert first["context"] == {"message_id": wamid} and "context" not in second
        assert first["to"] == second["to"] == "15551234567"
        assert first["type"] == "text" and first["text"]["body"].startswith("chapter 0")


async def test_typing_marks_the_latest_message_read_with_a_typing_indicator(
        driver: WhatsAppDriver, server: FakeWhatsApp, tmp_path: Path) -> None:
    async with running(driver, tmp_path / "home") as rig:
        await server.user_says("first", sender_id="15551234567")
        latest = await server.user_says("second", sender_id="15551234567")
        await channel_of(rig).typing("15551234567")
        assert server.recorded.read_receipts == [{"messaging_product": "whatsapp", "status": "read",
                                                  "message_id": latest, "typing_indicator": {"type": "text"}}]


async def test_a_failing_typing_indicator_is_not_raised(
        driver: WhatsAppDriver, server: FakeWhatsApp, tmp_path: Path) -> None:
    async with running(driver, tmp_path / "home") as rig:
        await server.user_says("hi", sender_id="15551234567")
        server.token = "rotated-token"  # every call of the plugin is now refused
        await channel_of(rig).typing("15551234567")
        await channel_of(rig).typing("never-seen")
        assert server.recorded.read_receipts == []


async def test_a_missing_token_variable_fails_start_naming_it(
        driver: WhatsAppDriver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV)
    with pytest.raises(RuntimeError, match=TOKEN_ENV):
        async with running(driver, tmp_path / "home"):
            pass


async def test_a_missing_app_secret_variable_fails_start_naming_it(
        driver: WhatsAppDriver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(APP_SECRET_ENV)
    with pytest.raises(RuntimeError, match=APP_SECRET_ENV):
        async with running(driver, tmp_path / "home"):
            pass


async def test_a_rejected_token_fails_start_without_revealing_it(
        driver: WhatsAppDriver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wrong = "EAAG-this-secret-must-not-leak-42"
    monkeypatch.setenv(TOKEN_ENV, wrong)
    with pytest.raises(RuntimeError) as failure:
        async with running(driver, tmp_path / "home"):
            pass
    assert TOKEN_ENV in str(failure.value) and "login failed" in str(failure.value)
    assert wrong not in str(failure.value)


async def test_a_webhook_port_in_use_fails_start(driver: WhatsAppDriver, tmp_path: Path) -> None:
    async with running(driver, tmp_path / "first") as first:
        port = channel_of(first).webhook_url.split(":")[2].split("/")[0]
        other = WhatsAppDriver(driver.server)
        with pytest.raises(RuntimeError, match="cannot listen"):
            async with running(other, tmp_path / "second", webhook_port=int(port)):
                pass


async def test_delivery_receipts_and_other_numbers_are_ignored(
        driver: WhatsAppDriver, server: FakeWhatsApp, tmp_path: Path) -> None:
    async with running(driver, tmp_path / "home") as rig:
        receipt = {"id": "wamid.SENT", "status": "delivered", "timestamp": "1700000000",
                   "recipient_id": "15551234567"}
        assert await server.post_event(server.event([], statuses=[receipt])) == 200
        other = server.event([server.message("for another number")], phone_number_id="999")
        assert await server.post_event(other) == 200
        await server.user_says("for us")
        assert [p["message"] for p in rig.incoming()] == ["for us"]


async def test_every_message_of_a_batched_event_is_queued_once(
        driver: WhatsAppDriver, server: FakeWhatsApp, tmp_path: Path) -> None:
    async with running(driver, tmp_path / "home") as rig:
        event = server.event([server.message("one", sender_id="111"), server.message("two", sender_id="222")],
                             names={"111": "Ann", "222": "Bob"})
        assert await server.post_event(event) == 200
        assert await server.post_event(event) == 200  # Meta redelivers when unsure
        assert [(p["message"], p["sender"]) for p in rig.incoming()] == [("one", "Ann"), ("two", "Bob")]


async def test_an_image_is_saved_with_its_caption_and_extension(
        driver: WhatsAppDriver, server: FakeWhatsApp, tmp_path: Path) -> None:
    async with running(driver, tmp_path / "home") as rig:
        message = server.message("look at this", kind="image", mime_type="image/png")
        server.media[message["image"]["id"]].data = b"\x89PNG fake"
        assert await server.post_event(server.event([message])) == 200
        (payload,) = rig.incoming()
        (saved,) = payload["files"]
        assert saved.endswith(".png") and Path(saved).read_bytes() == b"\x89PNG fake"
        assert payload["message"] == f"look at this\n[file: {saved}]"


async def test_pairing_gives_an_unknown_sender_a_code_and_queues_nothing(
        driver: WhatsAppDriver, server: FakeWhatsApp, tmp_path: Path) -> None:
    async with running(driver, tmp_path / "home", pairing=True) as rig:
        await server.user_says("hello?", sender_id="4479001234", sender="Eve")
        assert rig.incoming() == []
        assert rig.context is not None
        (path,) = rig.context.home.outgoing.glob("*.json")
        answer = json.loads(path.read_bytes())
        assert answer["conversationId"] == "4479001234" and "pairing code" in answer["message"]
        await channel_of(rig).send(OutgoingPayload.model_validate(answer))
        (sent,) = server.recorded.sent
        assert sent.conversation == "4479001234" and sent.text == answer["message"]
        events = [e for e in read_events(rig.context.home.events_file) if e["event"] == "message.rejected"]
        assert events and events[0]["reason"] == "pairing required"


async def test_a_long_rate_limit_is_handed_to_the_dispatcher_and_nothing_is_lost(
        driver: WhatsAppDriver, server: FakeWhatsApp, tmp_path: Path) -> None:
    async with running(driver, tmp_path / "home") as rig:
        outgoing = reply("later", "15551234567", channel="whatsapp")
        server.rate_limit_next(1, retry_after=120)
        with pytest.raises(DeliveryError) as limited:
            await channel_of(rig).send(outgoing)
        assert limited.value.retry_after == 120 and server.recorded.sent == []
        await channel_of(rig).send(outgoing)
        assert [item.text for item in server.recorded.sent] == ["later"]


async def test_a_throughput_error_without_retry_after_is_backed_off_and_retried(
        driver: WhatsAppDriver, server: FakeWhatsApp, tmp_path: Path) -> None:
    async with running(driver, tmp_path / "home") as rig:
        server.rate_limit_next(1, retry_after=None, code=131056)
        await channel_of(rig).send(reply("steady", "15551234567", channel="whatsapp"))
        assert [item.text for item in server.recorded.sent] == ["steady"]
        assert server.recorded.send_attempts == 2


async def test_an_undeliverable_message_is_refused_for_good_without_a_retry(
        driver: WhatsAppDriver, server: FakeWhatsApp, tmp_path: Path) -> None:
    async with running(driver, tmp_path / "home") as rig:
        server.refuse_next(131026)
        with pytest.raises(PermanentError, match="131026") as refused:
            await channel_of(rig).send(reply("hello?", "15551234567", channel="whatsapp"))
        assert not isinstance(refused.value, DeliveryError)
        assert "Message Undeliverable" in str(refused.value) and server.token not in str(refused.value)
        assert server.recorded.send_attempts == 1 and server.recorded.sent == []


async def test_a_file_is_uploaded_then_sent_as_a_document(
        driver: WhatsAppDriver, server: FakeWhatsApp, tmp_path: Path) -> None:
    report = tmp_path / "report.pdf"
    report.write_bytes(b"%PDF-1.4 fake")
    async with running(driver, tmp_path / "home") as rig:
        await channel_of(rig).send(reply("", "15551234567", channel="whatsapp", files=[str(report)]))
        (document,) = server.recorded.messages
        assert document["type"] == "document" and document["document"]["filename"] == "report.pdf"
        assert server.media[document["document"]["id"]].mime_type == "application/pdf"
        await async_wait_until(lambda: server.recorded.sent)
        assert server.recorded.sent[0].data == b"%PDF-1.4 fake"


async def test_an_event_that_cannot_be_queued_is_refused_so_meta_delivers_it_again(
        driver: WhatsAppDriver, server: FakeWhatsApp, tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    home.create()
    profile = ChannelProfile(id="wa", type="whatsapp", **driver.profile_options())
    events = EventLog(home.events_file)
    context = ChannelContext(home=home, settings=Settings(channels=[profile]), profile=profile, events=events,
                             outbox=FileOutbox(home, events, fsync=False))
    queued: list[IncomingPayload] = []
    failures = [OSError("disk full")]

    async def sink(payload: IncomingPayload) -> Path:
        if failures:
            raise failures.pop()
        queued.append(payload)
        return home.incoming / "queued.json"

    channel = driver.build_channel(profile, context)
    await channel.start(sink)
    try:
        server.webhook_url = channel.webhook_url
        event = server.event([server.message("keep me")])
        assert await server.post_event(event) == 500
        assert await server.post_event(event) == 200
        assert [p.message for p in queued] == ["keep me"]
    finally:
        await channel.stop()


async def test_a_voice_note_is_queued_as_audio_and_its_length_read_from_the_file(
        driver: WhatsAppDriver, server: FakeWhatsApp, tmp_path: Path) -> None:
    data = voice_bytes(tmp_path)
    async with running(driver, tmp_path / "home") as rig:
        message = server.message("", kind="audio", mime_type="audio/ogg; codecs=opus")
        message["audio"]["voice"] = True
        server.media[message["audio"]["id"]].data = data
        assert await server.post_event(server.event([message])) == 200
        payload = await queued_voice(rig, data, "audio/ogg")
        [entry] = payload["audio"]
        assert entry["seconds"] is None and entry["path"].endswith(".oga")  # the webhook gives no length
        seconds = round(seconds_of(data, tmp_path))
        assert await transcribed(rig, payload, data, tmp_path) == \
            f"[voice 0:{seconds:02d}] {SPOKEN}\n[file: {entry['path']}]"
