"""Telegram's one-tap answers against the fake Bot API: an inline keyboard under the reply's last chunk,
and a tap (callback_query) that is answered, marks the message answered and takes its keyboard away."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.telemetry.events import read_events
from gateway.testing import async_wait_until
from gateway.testing.conformance import BUTTONS, ChannelRig, reply, send_like_the_dispatcher
from plugins.telegram.inbound import NOT_YOURS
from tests.fakes.telegram_server import TOKEN, Edit, FakeTelegram
from tests.integration.test_telegram import TOKEN_ENV, TelegramDriver

pytestmark = [pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"), pytest.mark.timeout(60)]


@pytest.fixture
async def server(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeTelegram]:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    async with FakeTelegram() as fake:
        yield fake


async def started(server: FakeTelegram, root: Path, **fields: list[str]) -> ChannelRig:
    rig = ChannelRig(TelegramDriver(server), root, **fields)
    await rig.start()
    return rig


async def ask(rig: ChannelRig, text: str = "Allow `make clean`?") -> None:
    assert rig.channel is not None
    await send_like_the_dispatcher(rig.channel, reply(text, "1001", channel="telegram", buttons=BUTTONS))


async def test_a_tap_is_answered_and_its_message_says_answered_without_a_keyboard(
    server: FakeTelegram, tmp_path: Path
) -> None:
    rig = await started(server, tmp_path / "home")
    try:
        await ask(rig)
        [shown] = server.sent
        query = server.callback_query(1001, "ap:k3j9x2:1")
        await server.deliver(query, kind="callback_query")
        [tap] = await async_wait_until(rig.incoming)
        assert (tap["button"], tap["message"], tap["messageId"]) == ("ap:k3j9x2:1", "Deny", f"1001:cb{query['id']}")
        await async_wait_until(lambda: server.edits)
        assert server.answered == [(query["id"], "answered: Deny")]  # the client stops spinning
        assert server.edits == [Edit(chat="1001", message_id=shown.message_id,
                                     text="Allow `make clean`?\n\nanswered: Deny", keyboard=False)]
        with pytest.raises(AssertionError, match="shows a button"):  # nothing left to tap a second time
            server.callback_query(1001, "ap:k3j9x2:0")
    finally:
        await rig.stop()


async def test_a_tap_from_a_sender_not_allowed_is_told_so_and_leaves_the_keyboard(
    server: FakeTelegram, tmp_path: Path
) -> None:
    rig = await started(server, tmp_path / "home", allow_from=["1001"])
    try:
        await ask(rig)
        query = server.callback_query(1001, "ap:k3j9x2:0", user_id=666, first_name="Mallory")
        await server.deliver(query, kind="callback_query")
        await async_wait_until(lambda: server.answered)
        assert server.answered == [(query["id"], NOT_YOURS)]
        assert rig.incoming() == [] and server.edits == []
        assert rig.context is not None
        rejected = [e for e in read_events(rig.context.home.events_file) if e["event"] == "message.rejected"]
        assert [e["senderId"] for e in rejected] == ["666"]
    finally:
        await rig.stop()


async def test_a_long_reply_carries_its_keyboard_on_the_last_chunk_only(server: FakeTelegram, tmp_path: Path) -> None:
    rig = await started(server, tmp_path / "home")
    try:
        await ask(rig, "\n\n".join(f"paragraph {i} " + "x" * 3000 for i in range(3)))
        assert len(server.sent) == 3
        assert [s.buttons for s in server.sent] == [[], [], [("ap:k3j9x2:0", "Allow"), ("ap:k3j9x2:1", "Deny")]]
    finally:
        await rig.stop()


async def test_a_tap_in_a_forum_topic_belongs_to_that_topic(server: FakeTelegram, tmp_path: Path) -> None:
    rig = await started(server, tmp_path / "home")
    try:
        assert rig.channel is not None
        await send_like_the_dispatcher(rig.channel, reply("Go?", "-100777/5", channel="telegram", buttons=BUTTONS))
        assert (server.sent[0].chat, server.sent[0].topic) == ("-100777", 5)
        await server.deliver(server.callback_query(-100777, "ap:k3j9x2:0"), kind="callback_query")
        [tap] = await async_wait_until(rig.incoming)
        assert (tap["conversationId"], tap["button"]) == ("-100777/5", "ap:k3j9x2:0")
    finally:
        await rig.stop()
