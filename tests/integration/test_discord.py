"""The Discord channel (discord.py) against a fake Discord REST API and gateway on 127.0.0.1."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway import DeliveryError, OutgoingPayload, PermanentError
from gateway.telemetry.events import read_events
from gateway.testing import async_wait_until
from gateway.testing.conformance import ChannelConformance, ChannelDriver, ChannelRig, SentItem, reply
from gateway.testing.conformance_edits import EditConformance
from plugins.discord.channel import DiscordChannel
from tests.fakes.discord_server import MESSAGE_CONTENT_INTENT, DiscordFakeServer
from tests.integration.progress_notes import NoteDriver, ProgressNoteChecks, note
from tests.integration.stream_previews import StreamPreviewChecks
from tests.integration.voice_notes import SPOKEN, queued_voice, transcribed, voice_bytes

pytestmark = pytest.mark.timeout(60)

TOKEN_ENV = "SWITCHYARD_TEST_DISCORD_TOKEN"
DM = "4242"


class DiscordDriver(ChannelDriver):
    """Drives the fake Discord: users write in the DM channel `4242`, the bot's posts are recorded."""

    type = "discord"
    limit = 2000
    conversation = DM
    supports_buttons = True
    supports_edits = True

    def __init__(self, server: DiscordFakeServer, **options: Any) -> None:
        self.server = server
        self.options = options

    def profile_options(self) -> dict[str, Any]:
        return {"token_env": TOKEN_ENV, "api_base_url": self.server.api_base_url,
                "gateway_url": self.server.gateway_url, **self.options}

    async def user_says(self, text: str, *, sender_id: str = "1001", sender: str = "Ada",
                        file: tuple[str, bytes] | None = None) -> None:
        await self.server.message_create(self.conversation, self.server.user(sender_id, sender), text,
                                         files=[file] if file else [])

    async def bot_says(self, text: str) -> None:
        await self.server.message_create(self.conversation, self.server.bot_user(), text)

    async def user_edits_last(self, text: str, *, sender_id: str = "1001", sender: str = "Ada") -> dict[str, Any]:
        edited = self.server.edited_last(self.conversation, sender_id, text)
        await self.edit_again(edited)
        return edited

    async def edit_again(self, edit: Any) -> None:
        await self.server.dispatch("MESSAGE_UPDATE", edit)

    def sent(self) -> list[SentItem]:
        items = []
        for message in self.server.sent:
            filename, data = message.files[0] if message.files else (None, None)
            items.append(SentItem(conversation=message.channel_id, text=message.content or None,
                                  filename=filename, data=data, reply_to=message.reply_to, buttons=message.buttons))
        return items

    async def user_taps(self, button_id: str, *, sender_id: str = "1001", sender: str = "Ada") -> dict[str, Any]:
        interaction = self.server.interaction(self.conversation, self.server.user(sender_id, sender), button_id)
        await self.tap_again(interaction)
        return interaction

    async def tap_again(self, tap: Any) -> None:
        await self.server.dispatch("INTERACTION_CREATE", tap)

    def rate_limit_next(self, times: int, retry_after: float) -> None:
        self.server.rate_limit_next(times, retry_after)

    def fail_next(self, times: int, after: int = 0) -> None:
        self.server.fail_next(times, after)

    def refuse_next(self) -> None:
        self.server.refuse_next(403)


class DiscordNoteDriver(DiscordDriver, NoteDriver):
    """The driver plus the fake's posts and edits by message id."""

    other_conversation = "4343"

    def posted(self) -> list[tuple[str, str]]:
        return [(m.id, m.content) for m in self.server.sent if m.content is not None]

    def edits(self) -> list[tuple[str, str]]:
        return [(e.id, e.content) for e in self.server.edits]

    def delete_sent(self) -> None:
        self.server.delete_sent()


@pytest.fixture
async def server(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[DiscordFakeServer]:
    fake = DiscordFakeServer()
    async with fake:
        monkeypatch.setenv(TOKEN_ENV, fake.token)
        yield fake


class TestDiscordConformance(ChannelConformance, EditConformance):
    @pytest.fixture
    async def driver(self, server: DiscordFakeServer) -> DiscordDriver:
        return DiscordDriver(server)


class TestDiscordProgressNotes(ProgressNoteChecks):
    @pytest.fixture
    async def note_driver(self, server: DiscordFakeServer) -> DiscordNoteDriver:
        return DiscordNoteDriver(server)


class TestDiscordStreamPreviews(StreamPreviewChecks):
    @pytest.fixture
    async def note_driver(self, server: DiscordFakeServer) -> DiscordNoteDriver:
        return DiscordNoteDriver(server)


@pytest.fixture
async def rig(server: DiscordFakeServer, tmp_path: Path) -> AsyncIterator[ChannelRig]:
    started = ChannelRig(DiscordDriver(server), tmp_path / "home")
    await started.start()
    yield started
    await started.stop()


def channel_of(rig: ChannelRig) -> DiscordChannel:
    assert isinstance(rig.channel, DiscordChannel)
    return rig.channel


def outgoing(text: str, conversation: str | None = DM, **fields: Any) -> OutgoingPayload:
    """A reply of the test profile; `fields` override any key (e.g. messageId, workflowRunId)."""
    return reply(text, conversation or "", channel="discord").model_copy(update=fields)


def events(rig: ChannelRig, name: str) -> list[dict[str, Any]]:
    assert rig.context is not None
    return [e for e in read_events(rig.context.home.events_file) if e["event"] == name]


# --- connection and login -----------------------------------------------------------------------


async def test_the_bot_asks_for_the_message_content_intent(rig: ChannelRig, server: DiscordFakeServer) -> None:
    assert server.identifies and server.identifies[-1]["intents"] & MESSAGE_CONTENT_INTENT


async def test_a_missing_token_variable_disables_the_profile_naming_it(
    server: DiscordFakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TOKEN_ENV)
    with pytest.raises(RuntimeError, match=TOKEN_ENV):
        await ChannelRig(DiscordDriver(server), tmp_path / "home").start()
    assert not server.identifies


async def test_a_rejected_token_fails_start_without_revealing_it(
    server: DiscordFakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV, "very-secret-wrong-token")
    with pytest.raises(RuntimeError) as failure:
        await ChannelRig(DiscordDriver(server), tmp_path / "home").start()
    assert TOKEN_ENV in str(failure.value) and "very-secret-wrong-token" not in str(failure.value)


async def test_a_gateway_refusing_the_intent_fails_start_with_the_fix(
    server: DiscordFakeServer, tmp_path: Path
) -> None:
    server.close_on_identify(4014)
    with pytest.raises(RuntimeError, match="Message Content intent"):
        await ChannelRig(DiscordDriver(server), tmp_path / "home").start()


async def test_a_dropped_connection_resumes_and_messages_keep_coming(
    rig: ChannelRig, server: DiscordFakeServer
) -> None:
    await server.drop_connections(code=4000)
    await DiscordDriver(server).user_says("still there?")
    assert [p["message"] for p in await async_wait_until(rig.incoming)] == ["still there?"]
    assert server.resumes == 1


async def test_a_connection_discord_py_gives_up_on_is_restarted_with_backoff(
    rig: ChannelRig, server: DiscordFakeServer
) -> None:
    channel_of(rig).reconnect_initial_s = 0.05
    await server.drop_connections(code=4004)  # discord.py does not reconnect after "authentication failed"
    await async_wait_until(lambda: len(server.identifies) == 2)
    await DiscordDriver(server).user_says("back again")
    assert [p["message"] for p in await async_wait_until(rig.incoming)] == ["back again"]
    assert events(rig, "channel.reconnecting")[0]["profile"] == "conformance"


def test_importing_the_plugin_does_not_import_discord_py() -> None:
    code = "import sys, plugins.discord; print('discord' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                            cwd=Path(__file__).resolve().parents[2], check=True)
    assert result.stdout.strip() == "False"


# --- inbound --------------------------------------------------------------------------------------


async def test_messages_of_other_bots_are_ignored(rig: ChannelRig, server: DiscordFakeServer) -> None:
    await server.message_create(DM, server.user("777", "OtherBot", bot=True), "beep")
    await DiscordDriver(server).user_says("a person")
    assert [p["message"] for p in await async_wait_until(rig.incoming)] == ["a person"]


async def test_a_refused_sender_is_logged_as_rejected(
    server: DiscordFakeServer, tmp_path: Path
) -> None:
    rig = ChannelRig(DiscordDriver(server), tmp_path / "home", allow_from=["1001"])
    await rig.start()
    try:
        await DiscordDriver(server).user_says("let me in", sender_id="666", sender="Mallory")
        rejected = await async_wait_until(lambda: events(rig, "message.rejected"))
        assert rejected[0]["senderId"] == "666" and rig.incoming() == []
    finally:
        await rig.stop()


async def test_pairing_answers_an_unknown_sender_once_with_a_code(
    server: DiscordFakeServer, tmp_path: Path
) -> None:
    rig = ChannelRig(DiscordDriver(server, pairing=True), tmp_path / "home")
    await rig.start()
    try:
        driver = DiscordDriver(server)
        await driver.user_says("hello?", sender_id="555", sender="Eve")
        await driver.user_says("anyone?", sender_id="555", sender="Eve")
        assert rig.context is not None and rig.channel is not None
        home = rig.context.home
        answer = (await async_wait_until(lambda: list(home.outgoing.glob("*.json"))))[0]
        await rig.channel.send(OutgoingPayload.model_validate(json.loads(answer.read_bytes())))
        sent = server.sent
        assert len(sent) == 1 and "switchyard pair approve" in (sent[0].content or "")
        assert sent[0].channel_id == DM and sent[0].reply_to is not None
        await async_wait_until(lambda: len(events(rig, "message.rejected")) == 2)
        assert len(list(home.outgoing.glob("*.json"))) == 1 and rig.incoming() == []
    finally:
        await rig.stop()


async def test_require_mention_takes_only_what_is_addressed_to_the_bot(
    server: DiscordFakeServer, tmp_path: Path
) -> None:
    rig = ChannelRig(DiscordDriver(server, require_mention=True), tmp_path / "home")
    await rig.start()
    try:
        ada = server.user("1001", "Ada")
        bot = server.bot_user()
        await server.message_create("555", ada, "chatter among people", guild_id="77")
        await server.message_create("555", ada, f"<@{bot['id']}> status", guild_id="77", mentions=[bot])
        await server.message_create(DM, ada, "a direct message")
        await async_wait_until(lambda: len(rig.incoming()) == 2)
        assert [p["message"] for p in rig.incoming()] == ["status", "a direct message"]
    finally:
        await rig.stop()


# --- threads and runs ---------------------------------------------------------------------------


async def test_a_reply_to_a_run_message_carries_the_run(rig: ChannelRig, server: DiscordFakeServer) -> None:
    assert rig.channel is not None
    await rig.channel.send(outgoing("step 2 of 3 done", workflowRunId="run-7"))
    ada = server.user("1001", "Ada")
    await server.message_create(DM, ada, "and now?", reply_to=server.sent[0].id)
    await server.message_create(DM, ada, "something else")
    payloads = await async_wait_until(lambda: rig.incoming() if len(rig.incoming()) == 2 else None)
    assert [p.get("workflowRunId") for p in payloads] == ["run-7", None]


async def test_a_thread_opened_on_a_run_message_carries_the_run(
    rig: ChannelRig, server: DiscordFakeServer
) -> None:
    assert rig.channel is not None
    await rig.channel.send(outgoing("run started", conversation="555", workflowRunId="run-8"))
    thread_id = server.sent[0].id  # Discord gives a thread started from a message that message's id
    await server.message_create(thread_id, server.user("1001", "Ada"), "details?", guild_id="77")
    payload = (await async_wait_until(rig.incoming))[0]
    assert payload["conversationId"] == thread_id and payload["workflowRunId"] == "run-8"


async def test_a_thread_on_the_message_that_started_a_run_carries_the_run(
    rig: ChannelRig, server: DiscordFakeServer
) -> None:
    assert rig.channel is not None
    request = await server.message_create("555", server.user("1001", "Ada"), "build it", guild_id="77")
    await async_wait_until(rig.incoming)
    await rig.channel.send(outgoing("started run-10", conversation="555", messageId=request,
                                    workflowRunId="run-10"))
    await server.message_create(request, server.user("1001", "Ada"), "is it done?", guild_id="77")
    payloads = await async_wait_until(lambda: rig.incoming()[1:])
    assert payloads[0]["workflowRunId"] == "run-10"


async def test_a_thread_the_run_posts_in_carries_the_run(rig: ChannelRig, server: DiscordFakeServer) -> None:
    assert rig.channel is not None
    await server.guild_create("77", channel_id="555", thread_id="556")
    ada = server.user("1001", "Ada")
    await server.message_create("556", ada, "start the build", guild_id="77")
    first = (await async_wait_until(rig.incoming))[0]
    assert "workflowRunId" not in first
    await rig.channel.send(outgoing("build running", conversation="556", workflowRunId="run-9",
                                    messageId=first["messageId"]))
    await server.message_create("556", ada, "how far?", guild_id="77")
    second = await async_wait_until(lambda: rig.incoming()[1:])
    assert second[0]["workflowRunId"] == "run-9" and second[0]["conversationId"] == "556"


# --- outbound -------------------------------------------------------------------------------------


async def test_the_answer_replies_to_the_users_message(rig: ChannelRig, server: DiscordFakeServer) -> None:
    assert rig.channel is not None
    await DiscordDriver(server).user_says("question")
    question = (await async_wait_until(rig.incoming))[0]
    await rig.channel.send(outgoing("answer", messageId=question["messageId"]))
    elsewhere = await server.message_create("999", server.user("1001", "Ada"), "in another channel")
    await async_wait_until(lambda: len(rig.incoming()) == 2)
    await rig.channel.send(outgoing("not a reply here", messageId=elsewhere))
    assert [(m.content, m.reply_to) for m in server.sent] == [("answer", question["messageId"]),
                                                                ("not a reply here", None)]


async def test_without_a_conversation_the_answer_goes_to_a_dm(rig: ChannelRig, server: DiscordFakeServer) -> None:
    assert rig.channel is not None
    await rig.channel.send(outgoing("just for you", conversation=None, senderId="1001"))
    assert [(m.channel_id, m.content) for m in server.sent] == [(server.dm_channels["1001"], "just for you")]


async def test_a_user_who_accepts_no_dms_refuses_the_answer_for_good(
    rig: ChannelRig, server: DiscordFakeServer
) -> None:
    # a permanent refusal is dead-lettered at once by the dispatcher, not retried max_attempts times
    assert rig.channel is not None
    server.closed_dms.add("1002")
    with pytest.raises(PermanentError, match="DM with user 1002: HTTP 403 \\(code 50007\\)"):
        await rig.channel.send(outgoing("just for you", conversation=None, senderId="1002"))
    assert server.refused == 1 and server.sent == []


async def test_an_unreadable_file_is_replaced_by_a_notice(
    rig: ChannelRig, server: DiscordFakeServer, tmp_path: Path
) -> None:
    assert rig.channel is not None
    await rig.channel.send(outgoing("report", files=[str(tmp_path / "gone.txt")]))
    assert [m.content for m in server.sent] == ["report", "[file not sent: gone.txt cannot be read]"]


async def test_a_short_rate_limit_is_waited_out_inside_one_send(
    rig: ChannelRig, server: DiscordFakeServer
) -> None:
    assert rig.channel is not None
    server.rate_limit_next(1, retry_after=0.3)
    started = time.monotonic()
    await rig.channel.send(outgoing("once"))
    assert time.monotonic() - started >= 0.3
    assert server.rate_limited == 1 and [m.content for m in server.sent] == ["once"]


async def test_a_long_rate_limit_is_handed_back_to_the_dispatcher(
    rig: ChannelRig, server: DiscordFakeServer
) -> None:
    assert rig.channel is not None
    server.rate_limit_next(1, retry_after=45.0)
    payload = outgoing("later")
    with pytest.raises(DeliveryError) as failure:
        await rig.channel.send(payload)
    assert failure.value.retry_after == 45.0 and server.sent == []
    await rig.channel.send(payload)
    assert [m.content for m in server.sent] == ["later"]


async def test_a_server_error_discord_py_retries_is_delivered_once(
    rig: ChannelRig, server: DiscordFakeServer
) -> None:
    assert rig.channel is not None
    server.fail_next(1, status=500)
    await rig.channel.send(outgoing("despite a 500"))
    assert server.failed == 1 and [m.content for m in server.sent] == ["despite a 500"]


async def test_an_unknown_channel_refuses_a_file_for_good_and_the_next_send_works(
    rig: ChannelRig, server: DiscordFakeServer, tmp_path: Path
) -> None:
    assert rig.channel is not None
    report = tmp_path / "report.txt"
    report.write_bytes(b"numbers")
    server.refuse_next(404)
    with pytest.raises(PermanentError, match="HTTP 404 \\(code 10003\\): Unknown Channel") as failure:
        await rig.channel.send(outgoing("", files=[str(report)]))
    assert server.token not in str(failure.value)
    assert server.refused == 1 and server.sent == []
    await rig.channel.send(outgoing("", files=[str(report)]))
    assert [m.files for m in server.sent] == [[("report.txt", b"numbers")]]


async def test_a_note_whose_channel_is_gone_is_refused_for_good(rig: ChannelRig, server: DiscordFakeServer) -> None:
    driver = DiscordNoteDriver(server)
    await channel_of(rig).send(note(driver, "working: 1"))
    server.refuse_next(404)  # Unknown Channel, not Unknown Message: posting anew cannot help either
    with pytest.raises(PermanentError, match="10003"):
        await channel_of(rig).send(note(driver, "working: 2"))
    assert len(server.sent) == 1 and server.edits == []


async def test_typing_reaches_the_conversation_and_failures_stay_quiet(
    rig: ChannelRig, server: DiscordFakeServer
) -> None:
    channel = channel_of(rig)
    await channel.typing(DM)
    assert server.typing == [DM]
    server.typing_status = 403
    await channel.typing(DM)
    await channel.typing("not-a-discord-id")
    assert server.typing == [DM]


async def test_a_voice_message_is_queued_as_audio_with_discords_length_and_becomes_text(
    rig: ChannelRig, server: DiscordFakeServer, tmp_path: Path
) -> None:
    data = voice_bytes(tmp_path)
    await server.message_create("4242", server.user("1001", "Ada"), "", voice=(data, 3.4))
    payload = await queued_voice(rig, data, "audio/ogg")
    [entry] = payload["audio"]
    assert entry["seconds"] == 3.4
    assert await transcribed(rig, payload, data, tmp_path) == f"[voice 0:03] {SPOKEN}\n[file: {entry['path']}]"
