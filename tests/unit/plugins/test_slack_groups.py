"""Slack user groups as platform groups (plugins/slack/groups.py), slack-bolt in Socket Mode against the fake Slack
on 127.0.0.1: a member of @ops carries its id and handle as `senderGroups` and holds the role `group:ops` is
given, others carry none; usergroups.list is called once while its answer is cached, never when `roles:` names no
group; a refused lookup (missing_scope) keeps the message with what the rest of the grant gives."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.models import IncomingPayload
from gateway.roles import RoleBook
from gateway.testing import async_wait_until
from gateway.testing.rig import ChannelDriver, ChannelRig
from tests.fakes.slack_server import FakeSlack

pytestmark = pytest.mark.timeout(60)

BOT_ENV, APP_ENV = "TEST_SLACK_BOT_TOKEN", "TEST_SLACK_APP_TOKEN"
CHANNEL = "C100"


class Driver(ChannelDriver):
    type = "slack"

    def __init__(self, server: FakeSlack, roles: dict[str, list[str]]) -> None:
        self.server, self.roles = server, roles

    def profile_options(self) -> dict[str, Any]:
        return {"mode": "socket", "bot_token_env": BOT_ENV, "app_token_env": APP_ENV,
                "api_base_url": f"{self.server.url}/api/", "roles": self.roles}


@pytest.fixture
async def server(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeSlack]:
    fake = FakeSlack()
    fake.add_usergroup("S0OPS", "ops", ["U1", "U2"])
    fake.add_usergroup("S0DEV", "dev", ["U2"])
    async with fake:
        monkeypatch.setenv(BOT_ENV, fake.bot_token)
        monkeypatch.setenv(APP_ENV, fake.app_token)
        yield fake


async def _rig(server: FakeSlack, tmp_path: Path, roles: dict[str, list[str]]) -> ChannelRig:
    rig = ChannelRig(Driver(server, roles), tmp_path / "home")
    await rig.start()
    return rig


async def _say(rig: ChannelRig, server: FakeSlack, user: str, text: str) -> dict[str, Any]:
    before = len(rig.incoming())
    await server.deliver(server.message_event(text, user=user, channel=CHANNEL))
    payloads: list[dict[str, Any]] = await async_wait_until(lambda: len(rig.incoming()) > before and rig.incoming())
    return payloads[-1]


def _roles(rig: ChannelRig, payload: dict[str, Any]) -> tuple[str, ...]:
    assert rig.context is not None
    return RoleBook(rig.context.settings).grant_of(IncomingPayload.model_validate(payload)).roles


async def test_a_member_of_the_user_group_holds_its_role_and_others_do_not(server: FakeSlack, tmp_path: Path) -> None:
    rig = await _rig(server, tmp_path, {"admin": ["group:ops"], "reviewer": ["group:S0DEV"]})
    try:
        one = await _say(rig, server, "U1", "fix it")
        two = await _say(rig, server, "U2", "fix it too")
        three = await _say(rig, server, "U3", "fix it as well")
        assert one["senderGroups"] == ["S0OPS", "ops"]
        assert two["senderGroups"] == ["S0DEV", "S0OPS", "dev", "ops"]
        assert "senderGroups" not in three
        assert (_roles(rig, one), _roles(rig, two), _roles(rig, three)) == (
            ("admin",), ("admin", "reviewer"), ("member",))
        assert server.methods().count("usergroups.list") == 1
    finally:
        await rig.stop()


async def test_no_group_in_roles_means_no_platform_call(server: FakeSlack, tmp_path: Path) -> None:
    rig = await _rig(server, tmp_path, {"admin": ["U1"]})
    try:
        payload = await _say(rig, server, "U1", "hello")
        assert "senderGroups" not in payload and "usergroups.list" not in server.methods()
    finally:
        await rig.stop()


async def test_a_refused_lookup_keeps_the_message(server: FakeSlack, tmp_path: Path) -> None:
    server.usergroups_error = "missing_scope"
    rig = await _rig(server, tmp_path, {"admin": ["group:ops"]})
    try:
        payload = await _say(rig, server, "U1", "hello")
        assert payload["message"] == "hello" and "senderGroups" not in payload
        assert _roles(rig, payload) == ("member",)
    finally:
        await rig.stop()


async def test_a_tap_carries_the_tapper_s_groups(server: FakeSlack, tmp_path: Path) -> None:
    from gateway.testing.rig import BUTTONS, reply

    rig = await _rig(server, tmp_path, {"admin": ["group:ops"]})
    try:
        assert rig.channel is not None
        await rig.channel.send(reply("allow?", CHANNEL, channel="slack", buttons=BUTTONS))
        await server.tap(server.block_actions(BUTTONS[0]["id"], user="U1", channel=CHANNEL))
        [tap] = await async_wait_until(rig.incoming)
        assert tap["button"] == BUTTONS[0]["id"] and tap["senderGroups"] == ["S0OPS", "ops"]
    finally:
        await rig.stop()
