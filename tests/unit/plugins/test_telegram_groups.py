"""Telegram chat administrators as platform groups (plugins/telegram/groups.py), python-telegram-bot against the
fake Bot API on 127.0.0.1: an administrator's message carries `senderGroups` (`admins`, `admins:<chat>`, and
`creator…` for the owner) and holds the role `group:admins` is given; a member's carries none; the API is asked
only when `roles:` names a group, once per chat within the cache's life, never in a private chat; a failing or
stalled lookup neither drops nor holds up the message (logged once)."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.models import IncomingPayload
from gateway.roles import RoleBook
from gateway.settings import Settings
from gateway.testing import async_wait_until
from gateway.testing.rig import ChannelDriver, ChannelRig
from tests.fakes.telegram_server import TOKEN, FakeTelegram

pytestmark = [pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning"),
              pytest.mark.timeout(60)]

TOKEN_ENV = "SWITCHYARD_TEST_TELEGRAM_TOKEN"
GROUP = -100777
ROLES = {"admin": ["group:admins"], "owner": [f"group:creator:{GROUP}"]}


class Driver(ChannelDriver):
    type = "telegram"

    def __init__(self, server: FakeTelegram, roles: dict[str, list[str]] | None) -> None:
        self.server, self.roles = server, roles

    def profile_options(self) -> dict[str, Any]:
        return {"token_env": TOKEN_ENV, "base_url": f"{self.server.url}/bot",
                "base_file_url": f"{self.server.url}/file/bot", "reconnect_initial_sec": 0.05,
                "reconnect_max_sec": 0.5, **({"roles": self.roles} if self.roles is not None else {})}


@pytest.fixture(autouse=True)
def _token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)


@pytest.fixture
async def server() -> AsyncIterator[FakeTelegram]:
    fake = FakeTelegram()
    fake.administrators[str(GROUP)] = {1: "creator", 2: "administrator"}
    async with fake:
        yield fake


async def _rig(server: FakeTelegram, tmp_path: Path, roles: dict[str, list[str]] | None = ROLES) -> ChannelRig:
    rig = ChannelRig(Driver(server, roles), tmp_path / "home")
    await rig.start()
    return rig


async def _say(rig: ChannelRig, server: FakeTelegram, chat: int, user: int, text: str) -> dict[str, Any]:
    before = len(rig.incoming())
    await server.deliver(server.message(chat, text, user_id=user, first_name=f"user{user}"))
    payloads: list[dict[str, Any]] = await async_wait_until(lambda: len(rig.incoming()) > before and rig.incoming())
    return payloads[-1]


def _roles(rig: ChannelRig, payload: dict[str, Any]) -> tuple[str, ...]:
    assert rig.context is not None
    return RoleBook(rig.context.settings).grant_of(IncomingPayload.model_validate(payload)).roles


async def test_an_administrator_holds_the_role_of_group_admins_and_a_member_does_not(
        server: FakeTelegram, tmp_path: Path) -> None:
    rig = await _rig(server, tmp_path)
    try:
        admin = await _say(rig, server, GROUP, 2, "fix it")
        owner = await _say(rig, server, GROUP, 1, "fix it too")
        member = await _say(rig, server, GROUP, 3, "fix it as well")
        assert admin["senderGroups"] == ["admins", f"admins:{GROUP}"]
        assert owner["senderGroups"] == ["admins", f"admins:{GROUP}", "creator", f"creator:{GROUP}"]
        assert "senderGroups" not in member
        assert (_roles(rig, admin), _roles(rig, owner), _roles(rig, member)) == (
            ("admin",), ("admin", "owner"), ("member",))
        assert server.calls.count("getChatAdministrators") == 1  # one call per chat while the cache lives
        private = await _say(rig, server, 2, 2, "in private")  # an administrator elsewhere, alone with the bot
        assert "senderGroups" not in private and server.calls.count("getChatAdministrators") == 1
    finally:
        await rig.stop()


async def test_a_tap_carries_the_tapper_s_groups(server: FakeTelegram, tmp_path: Path) -> None:
    from gateway.testing.rig import BUTTONS, reply

    rig = await _rig(server, tmp_path)
    try:
        assert rig.channel is not None
        await rig.channel.send(reply("allow?", str(GROUP), channel="telegram", buttons=BUTTONS))
        await server.deliver(server.callback_query(GROUP, BUTTONS[0]["id"], user_id=2), kind="callback_query")
        [tap] = await async_wait_until(rig.incoming)
        assert tap["button"] == BUTTONS[0]["id"] and tap["senderGroups"] == ["admins", f"admins:{GROUP}"]
    finally:
        await rig.stop()


async def test_no_group_in_roles_means_no_platform_call(server: FakeTelegram, tmp_path: Path) -> None:
    rig = await _rig(server, tmp_path, roles={"admin": ["2"]})
    try:
        payload = await _say(rig, server, GROUP, 2, "hello")
        assert "senderGroups" not in payload and "getChatAdministrators" not in server.calls
    finally:
        await rig.stop()


async def test_a_failing_lookup_keeps_the_message_and_is_logged_once(
        server: FakeTelegram, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    server.fail_admins = 2
    rig = await _rig(server, tmp_path)
    try:
        with caplog.at_level(logging.WARNING, logger="switchyard.groups"):
            first = await _say(rig, server, GROUP, 2, "one")
            second = await _say(rig, server, GROUP, 2, "two")
        assert "senderGroups" not in first and "senderGroups" not in second
        assert _roles(rig, first) == ("member",)  # what the rest of the grant gives
        assert len([r for r in caplog.records if "cannot look up" in r.getMessage()]) == 1
        third = await _say(rig, server, GROUP, 2, "three")  # the API answers again
        assert third["senderGroups"] == ["admins", f"admins:{GROUP}"]
    finally:
        await rig.stop()


async def test_a_stalled_lookup_delays_the_message_no_longer_than_the_timeout(
        server: FakeTelegram, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gateway.channelkit.groups.LOOKUP_TIMEOUT_S", 0.5)
    server.hang_admins.set()
    rig = await _rig(server, tmp_path)
    try:
        started = time.monotonic()
        payload = await _say(rig, server, GROUP, 2, "are you there?")
        assert time.monotonic() - started < 3.0
        assert payload["message"] == "are you there?" and "senderGroups" not in payload
    finally:
        await rig.stop()


def test_the_settings_a_profile_names_groups_in() -> None:
    from gateway.channelkit.groups import names_groups

    settings = Settings.model_validate({"channels": [
        {"id": "a", "type": "telegram", "roles": {"admin": ["1", "group:admins"]}},
        {"id": "b", "type": "telegram", "roles": {"admin": ["1"]}}, {"id": "c", "type": "telegram"}]})
    assert [names_groups(profile) for profile in settings.channels] == [True, False, False]
