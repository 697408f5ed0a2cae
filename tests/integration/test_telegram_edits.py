"""Telegram edits in a group against the fake Bot API (issue 32 §5): an `edited_message` update naming one
member's waiting message but sent by another member is no edit of it, but a message of its own from the
member who sent it; a member's edit of their own waiting message still replaces its text."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.testing import async_wait_until
from gateway.testing.conformance import ChannelRig
from tests.fakes.telegram_server import TOKEN, FakeTelegram
from tests.integration.test_telegram import TOKEN_ENV, TelegramDriver

pytestmark = [pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"), pytest.mark.timeout(60)]

GROUP = -100777


@pytest.fixture
async def rig(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> AsyncIterator[tuple[ChannelRig, FakeTelegram]]:
    """The telegram channel (polling) with nothing taking messages out of its queue: each one waits."""
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    async with FakeTelegram() as server:
        started = ChannelRig(TelegramDriver(server), tmp_path / "home")
        await started.start()
        try:
            yield started, server
        finally:
            await started.stop()


def waiting(rig: ChannelRig) -> list[tuple[str, str, str | None]]:
    """(senderId, text, editOf) of each message waiting in the queue, oldest first."""
    return [(p["senderId"], p["message"], p.get("editOf")) for p in rig.incoming()]


def edited_by(message: dict[str, Any], text: str, user_id: int, first_name: str) -> dict[str, Any]:
    """`message` as an `edited_message` update carries it, with `text` and `from` another member."""
    return {**message, "text": text, "edit_date": message["date"] + 5,
            "from": {"id": user_id, "is_bot": False, "first_name": first_name}}


async def test_another_members_edit_of_a_waiting_message_is_a_message_of_their_own(
    rig: tuple[ChannelRig, FakeTelegram]
) -> None:
    channel, server = rig
    staging = server.message(GROUP, "deploy staging", user_id=1001, first_name="Ada")
    await server.deliver(staging)
    await async_wait_until(channel.incoming)
    await server.deliver(edited_by(staging, "deploy PRODUCTION", 1002, "Mallory"), kind="edited_message")
    await async_wait_until(lambda: len(channel.incoming()) == 2 or "deploy PRODUCTION" in str(channel.incoming()))
    assert waiting(channel)[0] == ("1001", "deploy staging", None), "1001's waiting message was replaced"
    assert waiting(channel) == [("1001", "deploy staging", None), ("1002", "deploy PRODUCTION", None)]
    assert [p["sender"] for p in channel.incoming()] == ["Ada", "Mallory"]


async def test_a_members_edit_of_their_own_waiting_message_still_replaces_it(
    rig: tuple[ChannelRig, FakeTelegram]
) -> None:
    channel, server = rig
    staging = server.message(GROUP, "deploy stagng", user_id=1001, first_name="Ada")
    await server.deliver(staging)
    await async_wait_until(channel.incoming)
    await server.deliver(edited_by(staging, "deploy staging", 1001, "Ada"), kind="edited_message")
    await async_wait_until(lambda: "deploy staging" in str(channel.incoming()))
    assert waiting(channel) == [("1001", "deploy staging", None)]
