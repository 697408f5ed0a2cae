"""The Slack plugin (slack-bolt, slack-sdk) against a fake Slack on 127.0.0.1, in both of its modes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway import Channel, ChannelContext, ChannelProfile, DeliveryError, OutgoingPayload, PermanentError
from gateway.testing import async_wait_until
from gateway.testing.conformance import ChannelConformance, ChannelDriver, ChannelRig, SentItem, reply
from gateway.testing.conformance_edits import EditConformance
from plugins.slack.channel import SlackChannel
from plugins.slack.transport import SocketTransport
from tests.fakes.slack_server import FakeSlack
from tests.integration.progress_notes import NoteDriver, ProgressNoteChecks, note
from tests.integration.stream_previews import StreamPreviewChecks
from tests.integration.voice_notes import SPOKEN, queued_voice, transcribed, voice_bytes

BOT_ENV, APP_ENV, SECRET_ENV = "TEST_SLACK_BOT_TOKEN", "TEST_SLACK_APP_TOKEN", "TEST_SLACK_SIGNING_SECRET"
CHANNEL = "C100"


class SlackDriver(ChannelDriver):
    """Drives the fake Slack for one mode (`socket` or `http`); extra profile keys via `options`."""

    type = "slack"
    limit = 40_000
    conversation = CHANNEL
    supports_buttons = True
    supports_edits = True

    def __init__(self, server: FakeSlack, mode: str, **options: Any) -> None:
        self.server = server
        self.mode = mode
        self.options = options
        self.channels: list[SlackChannel] = []
        self.written: dict[str, dict[str, Any]] = {}  # each sender's latest message event (or its edit's)

    def profile_options(self) -> dict[str, Any]:
        return {"mode": self.mode, "bot_token_env": BOT_ENV, "app_token_env": APP_ENV,
                "signing_secret_env": SECRET_ENV, "api_base_url": f"{self.server.url}/api/",
                "http_port": 0, **self.options}

    def build_channel(self, profile: ChannelProfile, context: ChannelContext) -> Channel:
        channel = super().build_channel(profile, context)
        assert isinstance(channel, SlackChannel)
        self.channels.append(channel)
        return channel

    async def deliver(self, event: dict[str, Any]) -> None:
        """Hands one event to the newest channel the way its mode receives events."""
        if self.mode == "http":
            self.server.events_url = self.channels[-1].transport.url  # type: ignore[union-attr]
        await self.server.deliver(event)

    async def user_says(self, text: str, *, sender_id: str = "1001", sender: str = "Ada",
                        file: tuple[str, bytes] | None = None) -> None:
        await self.user_writes(text, sender_id=sender_id, sender=sender, file=file)

    async def user_writes(self, text: str, *, sender_id: str = "1001", sender: str = "Ada",
                          file: tuple[str, bytes] | None = None, thread_ts: str | None = None) -> dict[str, Any]:
        """Delivers a person's message in CHANNEL (or in one of its threads); returns the event."""
        self.server.users[sender_id] = sender
        files = [self.server.add_file(*file)] if file else None
        event = self.server.message_event(text, user=sender_id, channel=CHANNEL, thread_ts=thread_ts, files=files)
        self.written[sender_id] = event
        await self.deliver(event)
        return event

    async def user_edits_last(self, text: str, *, sender_id: str = "1001", sender: str = "Ada") -> dict[str, Any]:
        edit = self.server.message_changed(self.written[sender_id], text)
        self.written[sender_id] = {**edit["message"], "channel": CHANNEL}
        await self.edit_again(edit)
        return edit

    async def edit_again(self, edit: Any) -> None:
        await self.deliver(edit)

    async def bot_says(self, text: str) -> None:
        await self.deliver(self.server.message_event(text, user=self.server.bot_user_id, channel=CHANNEL,
                                                     bot_id=self.server.bot_id))

    def sent(self) -> list[SentItem]:
        return list(self.server.sent)

    async def user_taps(self, button_id: str, *, sender_id: str = "1001", sender: str = "Ada") -> dict[str, Any]:
        self.server.users[sender_id] = sender
        payload = self.server.block_actions(button_id, user=sender_id, channel=CHANNEL)
        await self.tap_again(payload)
        return payload

    async def tap_again(self, tap: Any) -> None:
        if self.mode == "http":
            self.server.events_url = self.channels[-1].transport.url  # type: ignore[union-attr]
        await self.server.tap(tap)

    def rate_limit_next(self, times: int, retry_after: float) -> None:
        self.server.rate_limit_next(times, retry_after)

    def fail_next(self, times: int, after: int = 0) -> None:
        self.server.fail_next(times, after)

    def refuse_next(self) -> None:
        self.server.refuse_next()


class SlackNoteDriver(SlackDriver, NoteDriver):
    """The driver plus the fake's posts and edits by message ts (notes clipped at `text_limit`)."""

    other_conversation = "C200"
    limit = 500

    def profile_options(self) -> dict[str, Any]:
        return {**super().profile_options(), "text_limit": self.limit}

    def posted(self) -> list[tuple[str, str]]:
        return [(ts, text) for ts, _, text in self.server.posts]

    def edits(self) -> list[tuple[str, str]]:
        return [(ts, text) for _, ts, text in self.server.edits]

    def delete_sent(self) -> None:
        self.server.delete_sent()


@pytest.fixture
async def server(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeSlack]:
    fake = FakeSlack()
    async with fake:
        monkeypatch.setenv(BOT_ENV, fake.bot_token)
        monkeypatch.setenv(APP_ENV, fake.app_token)
        monkeypatch.setenv(SECRET_ENV, fake.signing_secret)
        yield fake


class TestSlackConformance(ChannelConformance, EditConformance):
    @pytest.fixture(params=["socket", "http"])
    async def driver(self, request: pytest.FixtureRequest, server: FakeSlack) -> SlackDriver:
        return SlackDriver(server, request.param)


class TestSlackProgressNotes(ProgressNoteChecks):
    @pytest.fixture
    async def note_driver(self, server: FakeSlack) -> SlackNoteDriver:
        return SlackNoteDriver(server, "socket")


class TestSlackStreamPreviews(StreamPreviewChecks):
    @pytest.fixture
    async def note_driver(self, server: FakeSlack) -> SlackNoteDriver:
        return SlackNoteDriver(server, "socket")


@pytest.fixture(params=["socket", "http"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def started(driver: SlackDriver, root: Path, **kwargs: Any) -> tuple[ChannelRig, SlackChannel]:
    rig = ChannelRig(driver, root, **kwargs)
    await rig.start()
    assert isinstance(rig.channel, SlackChannel)
    return rig, rig.channel


def outgoing(text: str, conversation: str, **fields: Any) -> OutgoingPayload:
    return reply(text, conversation, channel="slack", **fields)


# --- both modes ------------------------------------------------------------------------------


async def test_a_reply_in_a_runs_thread_carries_the_run_id(server: FakeSlack, mode: str, tmp_path: Path) -> None:
    driver = SlackDriver(server, mode)
    rig, channel = await started(driver, tmp_path / "home")
    try:
        await channel.send(outgoing("Run r-7 started", CHANNEL, workflowRunId="r-7"))
        root_ts = (await channel.send(outgoing("step 1 done", CHANNEL, workflowRunId="r-7"))).platform_ids[0]
        await driver.user_writes("how is it going?", thread_ts=root_ts)
        await driver.user_says("unrelated")
        payloads = await async_wait_until(lambda: len(rig.incoming()) == 2 and rig.incoming())
        threaded, top = payloads
        assert threaded["conversationId"] == f"{CHANNEL}:{root_ts}"
        assert threaded["sender"] == "Ada" and threaded["senderId"] == "1001"
        assert threaded["workflowRunId"] == "r-7"
        assert top["conversationId"] == CHANNEL and "workflowRunId" not in top
        await channel.send(outgoing("all good", threaded["conversationId"], workflowRunId="r-7"))
        assert (server.sent[-1].conversation, server.sent[-1].reply_to) == (CHANNEL, root_ts)
    finally:
        await rig.stop()


async def test_a_reply_sent_into_a_thread_makes_that_thread_the_runs(
    server: FakeSlack, mode: str, tmp_path: Path
) -> None:
    driver = SlackDriver(server, mode)
    rig, channel = await started(driver, tmp_path / "home")
    try:
        report = tmp_path / "report.txt"
        report.write_bytes(b"numbers")
        await channel.send(outgoing("in the thread", f"{CHANNEL}:1699.000100", workflowRunId="r-9",
                                    files=[str(report)]))
        assert [(s.conversation, s.reply_to, s.filename) for s in server.sent] == [
            (CHANNEL, "1699.000100", None), (CHANNEL, "1699.000100", "report.txt")]
        await driver.user_writes("and now?", thread_ts="1699.000100")
        payload = (await async_wait_until(rig.incoming))[0]
        assert payload["workflowRunId"] == "r-9"
    finally:
        await rig.stop()


async def test_typing_reacts_to_the_message_and_the_reply_clears_it(
    server: FakeSlack, mode: str, tmp_path: Path
) -> None:
    driver = SlackDriver(server, mode)
    rig, channel = await started(driver, tmp_path / "home")
    try:
        event = await driver.user_writes("think hard")
        payload = (await async_wait_until(rig.incoming))[0]
        await channel.typing(payload["conversationId"])
        assert server.reactions == [{"action": "add", "channel": CHANNEL, "timestamp": event["ts"], "name": "eyes"}]
        answer = OutgoingPayload(channel="slack", channelProfileId="conformance", message="done",
                                 timestamp=1, messageId=payload["messageId"], conversationId=CHANNEL)
        await channel.send(answer)
        assert server.reactions[-1]["action"] == "remove" and server.reactions[-1]["timestamp"] == event["ts"]
    finally:
        await rig.stop()


async def test_a_note_in_a_thread_is_edited_there_and_leaves_the_typing_reaction(
    server: FakeSlack, tmp_path: Path
) -> None:
    driver = SlackNoteDriver(server, "socket")
    rig, channel = await started(driver, tmp_path / "home")
    try:
        event = await driver.user_writes("think hard")
        payload = (await async_wait_until(rig.incoming))[0]
        await channel.typing(payload["conversationId"])
        thread = f"{CHANNEL}:{event['ts']}"
        for text in ("working: 1", "working: 2"):
            await channel.send(note(driver, text, conversation=thread).model_copy(
                update={"messageId": payload["messageId"]}))
        assert [(s.conversation, s.reply_to, s.text) for s in server.sent] == [(CHANNEL, event["ts"], "working: 1")]
        assert [(c, text) for c, _, text in server.edits] == [(CHANNEL, "working: 2")]
        assert [r["action"] for r in server.reactions] == ["add"]  # a note is not the answer
    finally:
        await rig.stop()


async def test_typing_failure_is_logged_not_raised(server: FakeSlack, mode: str, tmp_path: Path) -> None:
    driver = SlackDriver(server, mode, typing_reaction="eyes")
    rig, channel = await started(driver, tmp_path / "home")
    try:
        await driver.user_says("hello")
        payload = (await async_wait_until(rig.incoming))[0]
        server.bot_token = "xoxb-revoked"  # every later call fails with invalid_auth
        await channel.typing(payload["conversationId"])
        await channel.typing("never-seen")
        assert server.reactions == []
    finally:
        await rig.stop()


async def test_pairing_answers_an_unknown_sender_once_with_a_code(
    server: FakeSlack, mode: str, tmp_path: Path
) -> None:
    driver = SlackDriver(server, mode, pairing=True)
    rig, channel = await started(driver, tmp_path / "home", allow_from=["1001"])
    try:
        await driver.user_says("let me in", sender_id="U666", sender="Eve")
        await driver.user_says("please", sender_id="U666", sender="Eve")
        await driver.user_says("I am allowed", sender_id="1001")
        await async_wait_until(rig.incoming)
        assert [p["message"] for p in rig.incoming()] == ["I am allowed"]
        assert rig.context is not None
        queued = [json.loads(p.read_bytes()) for p in rig.context.home.outgoing.glob("*.json")]
        assert len(queued) == 1 and "pairing code" in queued[0]["message"]
        await channel.send(OutgoingPayload.model_validate(queued[0]))
        # only the asker sees the code: an ephemeral message in the channel, nothing posted for all
        assert [(c, user) for c, user, _ in server.ephemeral] == [(CHANNEL, "U666")]
        assert "switchyard pair approve" in server.ephemeral[0][2] and server.sent == []
        events = rig.context.home.events_file.read_text()
        assert events.count('"message.rejected"') == 2
    finally:
        await rig.stop()


async def test_a_reply_for_one_user_is_posted_normally_in_a_direct_message(
    server: FakeSlack, mode: str, tmp_path: Path
) -> None:
    rig, channel = await started(SlackDriver(server, mode), tmp_path / "home")
    try:
        await channel.send(OutgoingPayload(channel="slack", channelProfileId="slack", message="your code is 123",
                                           timestamp=1, messageId="1.0", conversationId="D0001",
                                           senderId="U666", visibleTo="U666"))
        assert [(item.conversation, item.text) for item in server.sent] == [("D0001", "your code is 123")]
        assert server.ephemeral == []
    finally:
        await rig.stop()


async def test_other_bots_edits_and_joins_are_not_messages(server: FakeSlack, mode: str, tmp_path: Path) -> None:
    driver = SlackDriver(server, mode)
    rig, _ = await started(driver, tmp_path / "home")
    try:
        await driver.deliver(server.message_event("beep", user="UOTHER", channel=CHANNEL, bot_id="BOTHER",
                                                  subtype="bot_message"))
        await driver.deliver(server.message_event("edited", user="1001", channel=CHANNEL,
                                                  subtype="message_changed"))
        await driver.deliver(server.message_event("<@U1> joined", user="U1", channel=CHANNEL,
                                                  subtype="channel_join"))
        await driver.user_says(f"<@{server.bot_user_id}> what is 1 &lt; 2 &amp;&amp; 3 &gt; 2?")
        await async_wait_until(rig.incoming)
        assert [p["message"] for p in rig.incoming()] == ["what is 1 < 2 && 3 > 2?"]
    finally:
        await rig.stop()


async def test_missing_token_variable_fails_start_naming_it_without_secrets(
    server: FakeSlack, mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = APP_ENV if mode == "socket" else SECRET_ENV
    monkeypatch.delenv(missing)
    with pytest.raises(RuntimeError) as caught:
        await started(SlackDriver(server, mode), tmp_path / "home")
    assert missing in str(caught.value)
    assert server.bot_token not in str(caught.value)
    monkeypatch.delenv(BOT_ENV)
    with pytest.raises(RuntimeError, match=BOT_ENV):
        await started(SlackDriver(server, mode), tmp_path / "home")


async def test_a_rejected_bot_token_fails_start_without_showing_it(
    server: FakeSlack, mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BOT_ENV, "xoxb-wrong-secret-value")
    with pytest.raises(RuntimeError) as caught:
        await started(SlackDriver(server, mode), tmp_path / "home")
    assert BOT_ENV in str(caught.value) and "invalid_auth" in str(caught.value)
    assert "xoxb-wrong-secret-value" not in str(caught.value)


async def test_a_long_rate_limit_goes_back_to_the_dispatcher(server: FakeSlack, mode: str, tmp_path: Path) -> None:
    rig, channel = await started(SlackDriver(server, mode), tmp_path / "home")
    try:
        server.rate_limit_next(1, retry_after=45)
        with pytest.raises(DeliveryError) as caught:
            await channel.send(outgoing("later", CHANNEL))
        assert caught.value.retry_after == 45
        assert server.sent == []
        await channel.send(outgoing("later", CHANNEL))
        assert [s.text for s in server.sent] == ["later"]
    finally:
        await rig.stop()


async def test_a_gone_channel_is_a_permanent_refusal_for_text_and_files(
    server: FakeSlack, mode: str, tmp_path: Path
) -> None:
    rig, channel = await started(SlackDriver(server, mode), tmp_path / "home")
    try:
        server.refuse_next("channel_not_found")
        with pytest.raises(PermanentError, match="channel_not_found") as caught:
            await channel.send(outgoing("hello?", CHANNEL))
        assert server.bot_token not in str(caught.value)
        report = tmp_path / "report.txt"
        report.write_bytes(b"numbers")
        server.refuse_next("is_archived")
        with pytest.raises(PermanentError, match="is_archived"):
            await channel.send(outgoing("", CHANNEL, files=[str(report)]))
        assert server.sent == [] and server.methods()[-1] == "files.getUploadURLExternal"
    finally:
        await rig.stop()


# --- Socket Mode -----------------------------------------------------------------------------


async def test_socket_mode_reconnects_after_the_connection_drops(
    server: FakeSlack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(SocketTransport, "watch_interval_s", 0.05)
    monkeypatch.setattr(SocketTransport, "reconnect_initial_s", 0.05)
    driver = SlackDriver(server, "socket")
    rig, channel = await started(driver, tmp_path / "home")
    try:
        assert server.connections == 1
        await server.drop_connections()
        await async_wait_until(lambda: server.connections == 2)
        await driver.user_says("still there?")
        assert [p["message"] for p in await async_wait_until(rig.incoming)] == ["still there?"]
        assert server.methods().count("apps.connections.open") == 2
    finally:
        await rig.stop()


async def test_socket_mode_keeps_retrying_while_slack_refuses_then_reconnects(
    server: FakeSlack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(SocketTransport, "watch_interval_s", 0.02)
    monkeypatch.setattr(SocketTransport, "reconnect_initial_s", 0.02)
    driver = SlackDriver(server, "socket")
    rig, channel = await started(driver, tmp_path / "home")
    try:
        app_token, server.app_token = server.app_token, "xapp-rotated"
        await server.drop_connections()
        await async_wait_until(lambda: server.methods().count("apps.connections.open") >= 4)
        server.app_token = app_token
        await async_wait_until(lambda: server.connections == 2)
        await driver.user_says("back again")
        assert [p["message"] for p in await async_wait_until(rig.incoming)] == ["back again"]
    finally:
        await rig.stop()


async def test_socket_mode_with_a_rejected_app_token_fails_start(
    server: FakeSlack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(APP_ENV, "xapp-not-the-right-one")
    with pytest.raises(RuntimeError) as caught:
        await started(SlackDriver(server, "socket"), tmp_path / "home")
    assert APP_ENV in str(caught.value) and "xapp-not-the-right-one" not in str(caught.value)
    assert server.connections == 0


# --- HTTP Events API -------------------------------------------------------------------------


async def test_http_mode_refuses_a_bad_signature(server: FakeSlack, tmp_path: Path) -> None:
    driver = SlackDriver(server, "http")
    rig, channel = await started(driver, tmp_path / "home")
    try:
        assert channel.transport is not None
        server.events_url = channel.transport.url  # type: ignore[union-attr]
        forged = json.dumps(server.callback(server.message_event("forged", user="1001", channel=CHANNEL)))
        assert await server.post_event(forged.encode(), secret="not-the-secret") == 401
        assert await server.post_event(forged.encode(), timestamp=1) == 401  # replayed from long ago
        await driver.user_says("genuine")
        assert [p["message"] for p in await async_wait_until(rig.incoming)] == ["genuine"]
    finally:
        await rig.stop()


async def test_http_mode_answers_the_url_verification_challenge(server: FakeSlack, tmp_path: Path) -> None:
    rig, channel = await started(SlackDriver(server, "http"), tmp_path / "home")
    try:
        server.events_url = channel.transport.url  # type: ignore[union-attr]
        body = json.dumps({"token": "legacy", "challenge": "c-42", "type": "url_verification"}).encode()
        assert await server.post_event(body) == 200
        assert "c-42" in server.last_http_body
    finally:
        await rig.stop()


async def test_http_mode_listens_where_configured(server: FakeSlack, tmp_path: Path) -> None:
    driver = SlackDriver(server, "http", http_path="hooks/slack")
    rig, channel = await started(driver, tmp_path / "home")
    try:
        assert channel.transport is not None
        url = channel.transport.url  # type: ignore[union-attr]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/hooks/slack")
    finally:
        await rig.stop()


def test_an_unknown_mode_is_refused_naming_the_key(tmp_path: Path) -> None:
    from plugins.slack import SlackConfig

    with pytest.raises(ValueError, match="mode"):
        SlackConfig.from_profile(ChannelProfile.model_validate({"id": "s", "type": "slack", "mode": "rtm"}))


async def test_an_audio_clip_is_queued_as_audio_with_slacks_length_and_becomes_text(
    server: FakeSlack, tmp_path: Path
) -> None:
    data = voice_bytes(tmp_path)
    rig, _ = await started(SlackDriver(server, "socket"), tmp_path / "home")
    try:
        server.users["U1001"] = "Ada"
        clip = {**server.add_file("audio_message.ogg", data, "audio/ogg"), "subtype": "slack_audio",
                "duration_ms": 4200}
        await server.deliver(server.message_event("", user="U1001", channel=CHANNEL, files=[clip]))
        payload = await queued_voice(rig, data, "audio/ogg")
        [entry] = payload["audio"]
        assert entry["seconds"] == 4.2
        assert await transcribed(rig, payload, data, tmp_path) == f"[voice 0:04] {SPOKEN}\n[file: {entry['path']}]"
    finally:
        await rig.stop()


async def test_a_text_file_is_not_taken_for_audio(server: FakeSlack, tmp_path: Path) -> None:
    rig, _ = await started(SlackDriver(server, "socket"), tmp_path / "home")
    try:
        server.users["U1001"] = "Ada"
        await server.deliver(server.message_event("notes", user="U1001", channel=CHANNEL,
                                                  files=[server.add_file("notes.txt", b"plain")]))
        payload = (await async_wait_until(rig.incoming))[0]
        assert len(payload["files"]) == 1 and "audio" not in payload
    finally:
        await rig.stop()
