"""The telegram channel (python-telegram-bot) against a fake Bot API on 127.0.0.1.

The conformance kit runs twice, with long polling and with a webhook; the tests below cover
what only Telegram has: reply threading, forum topics, run threads, typing, pairing, webhook
secrets, reconnecting after lost polls, which refusals are permanent, and login failures that never
reveal the token.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway import ChannelProfile, DeliveryError, OutgoingPayload, PermanentError
from gateway.channelkit.access import PairingStore
from gateway.runtime.dispatcher import Dispatcher
from gateway.settings import QueueSettings
from gateway.testing import async_wait_until
from gateway.testing.conformance import ChannelConformance, ChannelDriver, ChannelRig, SentItem, reply
from gateway.testing.conformance_edits import EditConformance
from plugins.telegram import TelegramOptions
from plugins.telegram.channel import TelegramChannel
from tests.fakes.telegram_server import BOT_ID, TOKEN, FakeTelegram
from tests.integration.progress_notes import NoteDriver, ProgressNoteChecks, note
from tests.integration.stream_previews import StreamPreviewChecks
from tests.integration.voice_notes import SPOKEN, queued_voice, transcribed, voice_bytes

pytestmark = [
    # PTB 22 warns when RetryAfter.retry_after is read as an int (the plugin handles both forms)
    pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
    pytest.mark.timeout(60),
]

TOKEN_ENV = "SWITCHYARD_TEST_TELEGRAM_TOKEN"
SECRET_ENV = "SWITCHYARD_TEST_TELEGRAM_SECRET"
SECRET = "webhook-secret-value"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class TelegramDriver(ChannelDriver):
    """Drives the fake Bot API for the conformance kit (private chats: chat id = user id)."""

    type = "telegram"
    limit = 4096
    conversation = "1001"
    supports_buttons = True
    supports_edits = True

    def __init__(self, server: FakeTelegram, mode: str = "polling", **options: Any) -> None:
        self.server = server
        self.mode = mode
        self.options = options

    def profile_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"token_env": TOKEN_ENV, "base_url": f"{self.server.url}/bot",
                                   "base_file_url": f"{self.server.url}/file/bot", "mode": self.mode,
                                   "reconnect_initial_sec": 0.05, "reconnect_max_sec": 0.5}
        if self.mode == "webhook":
            port = free_port()
            options.update(webhook_port=port, webhook_path="hook", webhook_secret_env=SECRET_ENV,
                           webhook_url=f"http://127.0.0.1:{port}/hook")
        return {**options, **self.options}

    async def user_says(self, text: str, *, sender_id: str = "1001", sender: str = "Ada",
                        file: tuple[str, bytes] | None = None) -> None:
        await self.server.deliver(self.server.message(int(sender_id), text, user_id=int(sender_id),
                                                      first_name=sender, file=file))

    async def bot_says(self, text: str) -> None:
        await self.server.deliver(self.server.message(int(self.conversation), text, user_id=BOT_ID,
                                                      first_name="Switchyard", is_bot=True))

    def sent(self) -> list[SentItem]:
        return [SentItem(conversation=s.chat, text=s.text or s.caption, filename=s.filename, data=s.data,
                         reply_to=str(s.reply_to) if s.reply_to else None, buttons=s.buttons)
                for s in self.server.sent]

    async def user_taps(self, button_id: str, *, sender_id: str = "1001", sender: str = "Ada") -> dict[str, Any]:
        query = self.server.callback_query(int(self.conversation), button_id, user_id=int(sender_id),
                                           first_name=sender)
        await self.tap_again(query)
        return query

    async def tap_again(self, tap: Any) -> None:
        await self.server.deliver(tap, kind="callback_query")

    async def user_edits_last(self, text: str, *, sender_id: str = "1001", sender: str = "Ada") -> dict[str, Any]:
        edited = self.server.edit_last(int(sender_id), text, user_id=int(sender_id))
        await self.edit_again(edited)
        return edited

    async def edit_again(self, edit: Any) -> None:
        await self.server.deliver(edit, kind="edited_message")

    def rate_limit_next(self, times: int, retry_after: float) -> None:
        self.server.rate_limit_next(times, retry_after)

    def fail_next(self, times: int, after: int = 0) -> None:
        self.server.fail_next(times, after)

    def refuse_next(self) -> None:
        self.server.refuse_next()


class TelegramNoteDriver(TelegramDriver, NoteDriver):
    """The driver plus the fake's posts and edits, each message named `<chat>:<message id>`."""

    other_conversation = "2002"

    def posted(self) -> list[tuple[str, str]]:
        return [(f"{s.chat}:{s.message_id}", s.text) for s in self.server.sent if s.text is not None]

    def edits(self) -> list[tuple[str, str]]:
        return [(f"{e.chat}:{e.message_id}", e.text) for e in self.server.edits]

    def delete_sent(self) -> None:
        self.server.delete_sent()


@pytest.fixture(autouse=True)
def _secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    monkeypatch.setenv(SECRET_ENV, SECRET)


@pytest.fixture
async def server() -> AsyncIterator[FakeTelegram]:
    fake = FakeTelegram()
    async with fake:
        yield fake


class TestTelegramPollingConformance(ChannelConformance, EditConformance):
    @pytest.fixture
    async def driver(self, server: FakeTelegram) -> TelegramDriver:
        return TelegramDriver(server)


class TestTelegramWebhookConformance(ChannelConformance, EditConformance):
    @pytest.fixture
    async def driver(self, server: FakeTelegram) -> TelegramDriver:
        return TelegramDriver(server, mode="webhook")


class TestTelegramProgressNotes(ProgressNoteChecks):
    @pytest.fixture
    async def note_driver(self, server: FakeTelegram) -> TelegramNoteDriver:
        return TelegramNoteDriver(server)


class TestTelegramStreamPreviews(StreamPreviewChecks):
    @pytest.fixture
    async def note_driver(self, server: FakeTelegram) -> TelegramNoteDriver:
        return TelegramNoteDriver(server)


@pytest.fixture
async def rig(server: FakeTelegram, tmp_path: Path) -> AsyncIterator[ChannelRig]:
    started = ChannelRig(TelegramDriver(server), tmp_path / "home")
    await started.start()
    yield started
    await started.stop()


def channel_of(rig: ChannelRig) -> TelegramChannel:
    assert isinstance(rig.channel, TelegramChannel)
    return rig.channel


def outgoing(text: str, conversation: str, **fields: Any) -> OutgoingPayload:
    return reply(text, conversation, channel="telegram").model_copy(update=fields)


def events(rig: ChannelRig, name: str) -> list[dict[str, Any]]:
    import json

    assert rig.context is not None
    lines = rig.context.home.events_file.read_text().splitlines()
    return [record for line in lines if (record := json.loads(line))["event"] == name]


# --- replies and threads ------------------------------------------------------------------------


async def test_a_reply_quotes_the_message_it_answers(rig: ChannelRig, server: FakeTelegram) -> None:
    await server.deliver(server.message(1001, "what time is it?"))
    payload = (await async_wait_until(rig.incoming))[0]
    message_id = payload["messageId"]
    assert message_id.startswith("1001:")
    await channel_of(rig).send(outgoing("noon", "1001", messageId=message_id))
    assert [(s.text, s.reply_to) for s in server.sent] == [("noon", int(message_id.split(":")[1]))]


async def test_only_the_first_part_quotes_and_a_foreign_message_id_is_not_quoted(
    rig: ChannelRig, server: FakeTelegram
) -> None:
    long_text = "\n\n".join(f"part {i} " + "y" * 3000 for i in range(2))
    await channel_of(rig).send(outgoing(long_text, "1001", messageId="1001:7"))
    await channel_of(rig).send(outgoing("elsewhere", "1001", messageId="2002:7"))
    assert [s.reply_to for s in server.sent] == [7, None, None]


async def test_same_message_number_in_two_chats_gives_two_distinct_message_ids(
    rig: ChannelRig, server: FakeTelegram
) -> None:
    await server.deliver(server.message(1001, "hi from Ada", user_id=1001))
    await server.deliver(server.message(2002, "hi from Bob", user_id=2002, first_name="Bob"))
    payloads = await async_wait_until(lambda: len(rig.incoming()) == 2 and rig.incoming())
    assert {p["messageId"] for p in payloads} == {"1001:1", "2002:1"}
    assert {p["conversationId"] for p in payloads} == {"1001", "2002"}


async def test_replying_to_a_run_message_carries_the_run_id(rig: ChannelRig, server: FakeTelegram) -> None:
    await channel_of(rig).send(outgoing("Build started (run r-42)", "1001", workflowRunId="r-42"))
    await channel_of(rig).send(outgoing("unrelated news", "1001"))
    run_message, other_message = server.sent[0].message_id, server.sent[1].message_id
    await server.deliver(server.message(1001, "status", reply_to=run_message))
    await server.deliver(server.message(1001, "thanks", reply_to=other_message))
    await server.deliver(server.message(1001, "hello again"))
    payloads = await async_wait_until(lambda: len(rig.incoming()) == 3 and rig.incoming())
    assert [(p["message"], p.get("workflowRunId")) for p in payloads] == [
        ("status", "r-42"), ("thanks", None), ("hello again", None)]


async def test_forum_topic_is_its_own_conversation_and_replies_stay_in_it(
    rig: ChannelRig, server: FakeTelegram
) -> None:
    await server.deliver(server.message(-100555, "in the topic", user_id=1001, topic=77))
    payload = (await async_wait_until(rig.incoming))[0]
    assert payload["conversationId"] == "-100555/77"
    await channel_of(rig).typing(payload["conversationId"])
    await channel_of(rig).send(outgoing("topic answer", payload["conversationId"], messageId=payload["messageId"]))
    assert [(s.chat, s.topic, s.text) for s in server.sent] == [("-100555", 77, "topic answer")]
    assert server.actions == [("-100555", "typing", 77)]


async def test_a_photo_arrives_at_its_largest_size(rig: ChannelRig, server: FakeTelegram) -> None:
    picture = b"\x89PNG" + b"p" * 500
    await server.deliver(server.message(1001, "look", photo=picture))
    payload = (await async_wait_until(rig.incoming))[0]
    assert len(payload["files"]) == 1 and Path(payload["files"][0]).read_bytes() == picture
    assert payload["message"].startswith("look\n[file: ")


async def test_an_attachment_that_cannot_be_fetched_still_delivers_the_message(
    rig: ChannelRig, server: FakeTelegram
) -> None:
    message = server.message(1001, "see file", file=("gone.txt", b"x"))
    del server.files[message["document"]["file_id"]]
    await server.deliver(message)
    payload = (await async_wait_until(rig.incoming))[0]
    assert payload["files"] == []
    assert payload["message"].startswith("see file\n[file not downloaded: gone.txt")


async def test_a_command_addressed_to_the_bot_in_a_group_loses_the_mention(
    rig: ChannelRig, server: FakeTelegram
) -> None:
    await server.deliver(server.message(-100900, "/status@switchyard_test_bot now", user_id=1001))
    assert (await async_wait_until(rig.incoming))[0]["message"] == "/status now"


async def test_emoji_heavy_text_is_split_within_telegrams_utf16_limit(
    rig: ChannelRig, server: FakeTelegram
) -> None:
    await channel_of(rig).send(outgoing("\U0001F600" * 3000 + " done", "1001"))
    texts = [s.text or "" for s in server.sent]
    assert len(texts) == 2 and "".join(texts).endswith(" done")
    assert all(len(t.encode("utf-16-le")) // 2 <= 4096 for t in texts)


async def test_a_note_whose_text_has_not_changed_is_delivered(rig: ChannelRig, server: FakeTelegram) -> None:
    driver = TelegramNoteDriver(server)
    for _ in range(2):  # Telegram answers the second edit "message is not modified"
        await channel_of(rig).send(note(driver, "working: using Read"))
        await channel_of(rig).send(note(driver, "working: using Read "))
    assert [s.text for s in server.sent] == ["working: using Read"] and server.edits == []


async def test_a_note_in_a_forum_topic_is_edited_there(rig: ChannelRig, server: FakeTelegram) -> None:
    driver = TelegramNoteDriver(server)
    await channel_of(rig).send(note(driver, "working: 1", conversation="-100555/77"))
    await channel_of(rig).send(note(driver, "working: 2", conversation="-100555/77"))
    assert [(s.chat, s.topic, s.text) for s in server.sent] == [("-100555", 77, "working: 1")]
    assert [(e.chat, e.message_id, e.text) for e in server.edits] == [("-100555", server.sent[0].message_id,
                                                                         "working: 2")]


async def test_an_emoji_note_is_clipped_within_telegrams_utf16_limit(rig: ChannelRig, server: FakeTelegram) -> None:
    await channel_of(rig).send(note(TelegramNoteDriver(server), "\U0001F600" * 3000))
    [sent] = server.sent
    assert sent.text is not None and sent.text.endswith("…")
    assert 4000 <= len(sent.text.encode("utf-16-le")) // 2 <= 4096


# --- rate limits, failures, migration -----------------------------------------------------------


async def test_a_long_rate_limit_goes_back_to_the_dispatcher_at_once(
    rig: ChannelRig, server: FakeTelegram
) -> None:
    server.rate_limit_next(1, retry_after=45)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(DeliveryError) as caught:
        await channel_of(rig).send(outgoing("later", "1001"))
    assert caught.value.retry_after == 45
    assert loop.time() - started < 5
    await channel_of(rig).send(outgoing("later", "1001"))
    assert [s.text for s in server.sent] == ["later"]


async def test_rate_limit_as_timedelta_is_waited_out(
    rig: ChannelRig, server: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PTB_TIMEDELTA", "true")
    server.rate_limit_next(2, retry_after=0.1)
    await channel_of(rig).send(outgoing("patience", "1001"))
    assert [s.text for s in server.sent] == ["patience"]


async def test_a_group_upgraded_to_a_supergroup_still_gets_the_reply(
    rig: ChannelRig, server: FakeTelegram
) -> None:
    server.migrated["-300"] = -100300
    await channel_of(rig).send(outgoing("moved", "-300"))
    assert [(s.chat, s.text) for s in server.sent] == [("-100300", "moved")]


@pytest.mark.parametrize(("status", "description", "error"), [
    (400, "Bad Request: chat not found", PermanentError),
    (403, "Forbidden: bot was kicked from the group chat", PermanentError),
    (400, "Bad Request: message text is empty", DeliveryError),
])
async def test_only_a_refusal_for_good_is_permanent(
    rig: ChannelRig, server: FakeTelegram, status: int, description: str, error: type[Exception]
) -> None:
    server.refuse_next(status, description)
    with pytest.raises(error) as caught:
        await channel_of(rig).send(outgoing("hello?", "1001"))
    assert type(caught.value) is error
    assert description.split(": ")[1].lower() in str(caught.value).lower()
    assert TOKEN not in str(caught.value)
    await channel_of(rig).send(outgoing("hello again", "1001"))
    assert [s.text for s in server.sent] == ["hello again"]


async def test_polling_reconnects_after_lost_polls(rig: ChannelRig, server: FakeTelegram) -> None:
    server.fail_polls = 3
    await server.deliver(server.message(1001, "still there?"))
    payload = (await async_wait_until(rig.incoming, 20))[0]
    assert payload["message"] == "still there?"
    assert events(rig, "channel.reconnecting")
    assert events(rig, "channel.reconnected")


# --- typing ---------------------------------------------------------------------------------------


async def test_typing_indicator_reaches_the_chat(rig: ChannelRig, server: FakeTelegram) -> None:
    await channel_of(rig).typing("1001")
    assert server.actions == [("1001", "typing", None)]


async def test_a_failing_typing_indicator_is_only_logged(
    rig: ChannelRig, server: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    server.fail_actions = 1
    await channel_of(rig).typing("1001")
    assert server.actions == []
    assert "typing indicator" in caplog.text


# --- access -------------------------------------------------------------------------------------


async def test_bots_are_ignored(rig: ChannelRig, server: FakeTelegram) -> None:
    await server.deliver(server.message(1001, "beep", user_id=777, first_name="OtherBot", is_bot=True))
    await server.deliver(server.message(1001, "a person"))
    await async_wait_until(rig.incoming)
    assert [p["message"] for p in rig.incoming()] == ["a person"]


async def test_a_refused_sender_is_recorded(server: FakeTelegram, tmp_path: Path) -> None:
    rig = ChannelRig(TelegramDriver(server), tmp_path / "home", allow_from=["1001"])
    await rig.start()
    try:
        await server.deliver(server.message(666, "let me in", user_id=666, first_name="Mallory"))
        rejected = await async_wait_until(lambda: events(rig, "message.rejected"))
        assert rejected[0]["senderId"] == "666" and rejected[0]["conversation"] == "666"
        assert rig.incoming() == [] and server.sent == []
    finally:
        await rig.stop()


async def test_pairing_gives_a_code_once_then_admits_after_approval(
    server: FakeTelegram, tmp_path: Path
) -> None:
    rig = ChannelRig(TelegramDriver(server, pairing=True), tmp_path / "home")
    await rig.start()
    try:
        assert rig.context is not None and rig.channel is not None
        home = rig.context.home
        await server.deliver(server.message(555, "hello?", user_id=555, first_name="Eve"))
        await server.deliver(server.message(555, "hello??", user_id=555, first_name="Eve"))
        replies = await async_wait_until(lambda: sorted(home.outgoing.glob("*.json")))
        await async_wait_until(lambda: len(events(rig, "message.rejected")) == 2)
        assert len(list(home.outgoing.glob("*.json"))) == 1
        for path in replies:  # what the dispatcher does
            await rig.channel.send(OutgoingPayload.model_validate_json(path.read_bytes()))
        assert [s.chat for s in server.sent] == ["555"]
        code = next(word for word in (server.sent[0].text or "").split() if word.rstrip(";.").isupper()
                    and len(word.rstrip(";.")) == 8)
        assert PairingStore(home).approve(code.rstrip(";.")) is not None
        await server.deliver(server.message(555, "now?", user_id=555, first_name="Eve"))
        assert [p["message"] for p in await async_wait_until(rig.incoming)] == ["now?"]
    finally:
        await rig.stop()


# --- webhook --------------------------------------------------------------------------------------


async def test_webhook_registers_its_url_and_secret_and_refuses_a_wrong_secret(
    server: FakeTelegram, tmp_path: Path
) -> None:
    rig = ChannelRig(TelegramDriver(server, mode="webhook"), tmp_path / "home")
    await rig.start()
    try:
        assert server.webhook is not None
        assert server.webhook["url"].endswith("/hook") and server.webhook["secret_token"] == SECRET
        await server.deliver(server.message(1001, "forged"), secret="wrong")
        await server.deliver(server.message(1001, "genuine"))
        await async_wait_until(rig.incoming)
        assert server.webhook_statuses == [403, 200]
        assert [p["message"] for p in rig.incoming()] == ["genuine"]
        assert "getUpdates" not in server.calls
    finally:
        await rig.stop()


# --- settings and login -------------------------------------------------------------------------


async def test_missing_token_env_disables_the_profile_naming_the_variable(
    server: FakeTelegram, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TOKEN_ENV)
    rig = ChannelRig(TelegramDriver(server), tmp_path / "home")
    with pytest.raises(RuntimeError, match=TOKEN_ENV):
        await rig.start()
    assert server.calls == []


async def test_rejected_token_raises_naming_the_variable_but_never_the_token(
    server: FakeTelegram, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    wrong = "999999:WRONG-secret-token-value"
    monkeypatch.setenv(TOKEN_ENV, wrong)
    caplog.set_level(logging.DEBUG)
    rig = ChannelRig(TelegramDriver(server), tmp_path / "home")
    with pytest.raises(RuntimeError) as caught:
        await rig.start()
    assert TOKEN_ENV in str(caught.value) and "rejected" in str(caught.value)
    assert wrong not in str(caught.value)
    plugin_side = [r for r in caplog.records if not r.name.startswith("aiohttp")]  # the fake's access log
    assert plugin_side and not [r for r in plugin_side if wrong in r.getMessage() or wrong in (r.exc_text or "")]
    assert server.calls == []  # the fake refused it before any method ran


async def test_an_unreachable_api_fails_start_with_a_clear_reason(tmp_path: Path) -> None:
    driver = TelegramDriver(FakeTelegram(), base_url=f"http://127.0.0.1:{free_port()}/bot")
    with pytest.raises(RuntimeError, match="cannot log in"):
        await ChannelRig(driver, tmp_path / "home").start()


def test_webhook_mode_without_a_public_url_is_refused() -> None:
    profile = ChannelProfile.model_validate({"id": "tg", "type": "telegram", "token_env": TOKEN_ENV,
                                             "mode": "webhook"})
    with pytest.raises(ValueError, match="webhook_url"):
        TelegramOptions.from_profile(profile)


def test_the_token_never_reaches_the_log_even_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    from plugins.telegram.redaction import TokenFilter

    caplog.set_level(logging.DEBUG)
    token_filter = TokenFilter(TOKEN)
    token_filter.install()
    try:
        logging.getLogger("httpx").info("HTTP Request: POST http://x/bot%s/getUpdates", TOKEN)
        logging.getLogger("telegram.ext.Updater").error("The token `%s` was rejected", TOKEN)
    finally:
        token_filter.remove()
    assert TOKEN not in caplog.text
    assert "The token `***` was rejected" in caplog.text



# --- attachments checked again at delivery ------------------------------------------------------------


def _dispatch(rig: ChannelRig) -> Dispatcher:
    """A dispatcher delivering the rig's outgoing/ through its telegram channel."""
    assert rig.context is not None and rig.channel is not None
    return Dispatcher(rig.context.home, [rig.channel], rig.context.events,
                      QueueSettings(fsync=False, backoff_initial_ms=5, backoff_max_ms=20, max_attempts=2))


def _drop_outgoing(rig: ChannelRig, text: str, files: list[str]) -> str:
    """Writes a reply straight into outgoing/, as another program (or a stale outbox check) would."""
    assert rig.context is not None
    payload = outgoing(text, "1001", files=files)
    name = f"telegram_{payload.messageId}_{payload.timestamp}.json"
    (rig.context.home.outgoing / name).write_bytes(payload.to_json())
    return name


async def _delivered(rig: ChannelRig, dispatcher: Dispatcher, name: str) -> None:
    assert rig.context is not None
    dispatcher.rescan()
    await async_wait_until(lambda: any(rig.context.home.sent.glob(f"*{name}")) if rig.context else False)
    await dispatcher.stop(1)


async def test_a_payload_dropped_into_outgoing_cannot_upload_a_file_outside_the_home(
        rig: ChannelRig, server: FakeTelegram, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"not yours")
    name = _drop_outgoing(rig, "the report", ["/etc/passwd", str(outside)])
    await _delivered(rig, _dispatch(rig), name)
    assert [s.filename for s in server.sent if s.filename] == []
    (text,) = [s.text or "" for s in server.sent]
    assert text.startswith("the report") and text.count("[file not sent:") == 2
    refused = events(rig, "outgoing.file_refused")
    assert sorted(e["path"] for e in refused) == sorted(["/etc/passwd", str(outside)])


async def test_an_allowed_file_swapped_for_a_symlink_before_delivery_is_not_uploaded(
        rig: ChannelRig, server: FakeTelegram, tmp_path: Path) -> None:
    await server.deliver(server.message(1001, "my notes", file=("notes.txt", b"mine")))
    (saved,) = (await async_wait_until(rig.incoming))[0]["files"]
    name = _drop_outgoing(rig, "your notes back", [saved])  # the outbox accepted it: the user's own file
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"top secret")
    os.unlink(saved)
    os.symlink(secret, saved)
    await _delivered(rig, _dispatch(rig), name)
    assert all(s.data != b"top secret" for s in server.sent)
    assert [s.text for s in server.sent] == [f"your notes back\n[file not sent: {saved} is outside the allowed "
                                             "folders or does not exist]"]


async def test_a_fifo_attachment_does_not_hang_delivery(rig: ChannelRig, server: FakeTelegram) -> None:
    await server.deliver(server.message(1001, "my notes", file=("notes.txt", b"mine")))
    (saved,) = (await async_wait_until(rig.incoming))[0]["files"]
    fifo = str(Path(saved).with_name("pipe"))
    os.mkfifo(fifo)
    name = _drop_outgoing(rig, "a pipe", [fifo])
    await _delivered(rig, _dispatch(rig), name)
    assert [(s.text, s.filename) for s in server.sent] == [
        (f"a pipe\n[file not sent: {fifo} is outside the allowed folders or does not exist]", None)]


async def test_the_users_own_attachment_is_uploaded_at_delivery(rig: ChannelRig, server: FakeTelegram) -> None:
    await server.deliver(server.message(1001, "my notes", file=("notes.txt", b"mine")))
    (saved,) = (await async_wait_until(rig.incoming))[0]["files"]
    name = _drop_outgoing(rig, "your notes back", [saved])
    await _delivered(rig, _dispatch(rig), name)
    assert [(s.method, s.caption, s.filename, s.data) for s in server.sent] == [  # one message: the text its caption
        ("sendDocument", "your notes back", Path(saved).name, b"mine")]


async def test_edits_of_a_stream_are_spaced_as_the_bot_faq_asks_private_and_group(rig: ChannelRig) -> None:
    assert (channel_of(rig).edit_interval_for("1001"), channel_of(rig).edit_interval_for("-100123/7")) == (1.0, 3.0)


async def test_a_voice_note_is_queued_as_audio_with_telegrams_length_and_becomes_text(
    rig: ChannelRig, server: FakeTelegram, tmp_path: Path
) -> None:
    data = voice_bytes(tmp_path)
    await server.deliver(server.message(1001, voice=(data, 7)))
    payload = await queued_voice(rig, data, "audio/ogg")
    [entry] = payload["audio"]
    assert entry["seconds"] == 7 and entry["path"].endswith("voice.oga")
    assert await transcribed(rig, payload, data, tmp_path) == f"[voice 0:07] {SPOKEN}\n[file: {entry['path']}]"


async def test_an_audio_file_is_queued_as_audio_too(rig: ChannelRig, server: FakeTelegram, tmp_path: Path) -> None:
    data = voice_bytes(tmp_path)
    await server.deliver(server.message(1001, "the meeting", audio=("meeting.ogg", data, 65)))
    payload = (await async_wait_until(rig.incoming))[0]
    assert payload["audio"] == [{"path": payload["files"][0], "seconds": 65, "mime": "audio/ogg"}]
    assert payload["message"].startswith("the meeting\n[file: ")
