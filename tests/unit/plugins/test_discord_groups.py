"""Discord roles as platform groups (plugins/discord/groups.py), discord.py against the fake gateway and REST API on
127.0.0.1: a server member's message carries their role ids and `<server id>:<role name>` as `senderGroups`, and
holds the role `group:<role id>` is given; a member without that role, a DM, and a profile whose `roles:` names no
group carry none."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.models import IncomingPayload
from gateway.roles import RoleBook
from gateway.testing import async_wait_until
from gateway.testing.rig import ChannelDriver, ChannelRig
from tests.fakes.discord_server import DiscordFakeServer

pytestmark = pytest.mark.timeout(60)

TOKEN_ENV = "SWITCHYARD_TEST_DISCORD_TOKEN"
GUILD, CHANNEL, THREAD, DM = "770000000000000001", "770000000000000002", "770000000000000003", "4242"
OPS, DEV = "770000000000000010", "770000000000000011"


class Driver(ChannelDriver):
    type = "discord"

    def __init__(self, server: DiscordFakeServer, roles: dict[str, list[str]]) -> None:
        self.server, self.roles = server, roles

    def profile_options(self) -> dict[str, Any]:
        return {"token_env": TOKEN_ENV, "api_base_url": self.server.api_base_url,
                "gateway_url": self.server.gateway_url, "roles": self.roles}


@pytest.fixture
async def server(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[DiscordFakeServer]:
    fake = DiscordFakeServer()
    async with fake:
        monkeypatch.setenv(TOKEN_ENV, fake.token)
        yield fake


async def _started(server: DiscordFakeServer, tmp_path: Path, roles: dict[str, list[str]]) -> ChannelRig:
    rig = ChannelRig(Driver(server, roles), tmp_path / "home")
    await rig.start()
    await server.guild_create(GUILD, channel_id=CHANNEL, thread_id=THREAD, roles={OPS: "ops", DEV: "dev"})
    return rig


async def _say(rig: ChannelRig, server: DiscordFakeServer, user: str, text: str, *, channel: str = CHANNEL,
               roles: list[str] | None = None) -> dict[str, Any]:
    before = len(rig.incoming())
    guild = GUILD if channel != DM else None
    await server.message_create(channel, server.user(user, f"user{user}"), text, guild_id=guild, roles=roles)
    payloads: list[dict[str, Any]] = await async_wait_until(lambda: len(rig.incoming()) > before and rig.incoming())
    return payloads[-1]


def _roles(rig: ChannelRig, payload: dict[str, Any]) -> tuple[str, ...]:
    assert rig.context is not None
    return RoleBook(rig.context.settings).grant_of(IncomingPayload.model_validate(payload)).roles


async def test_a_member_with_the_role_holds_what_group_gives_and_others_do_not(
        server: DiscordFakeServer, tmp_path: Path) -> None:
    rig = await _started(server, tmp_path, {"admin": [f"group:{OPS}"], "reviewer": [f"group:{GUILD}:dev"]})
    try:
        ops = await _say(rig, server, "1001", "fix it", roles=[OPS])
        dev = await _say(rig, server, "1002", "fix it too", roles=[DEV])
        nobody = await _say(rig, server, "1003", "fix it as well", roles=[])
        direct = await _say(rig, server, "1001", "in a DM", channel=DM)
        assert set(ops["senderGroups"]) == {OPS, f"{GUILD}:ops", GUILD, f"{GUILD}:@everyone"}
        assert set(dev["senderGroups"]) == {DEV, f"{GUILD}:dev", GUILD, f"{GUILD}:@everyone"}
        assert set(nobody["senderGroups"]) == {GUILD, f"{GUILD}:@everyone"}
        assert "senderGroups" not in direct
        assert (_roles(rig, ops), _roles(rig, dev), _roles(rig, nobody), _roles(rig, direct)) == (
            ("admin",), ("reviewer",), ("member",), ("member",))
    finally:
        await rig.stop()


async def test_no_group_in_roles_puts_no_groups_on_the_payload(server: DiscordFakeServer, tmp_path: Path) -> None:
    rig = await _started(server, tmp_path, {"admin": ["1001"]})
    try:
        payload = await _say(rig, server, "1001", "hello", roles=[OPS])
        assert "senderGroups" not in payload and _roles(rig, payload) == ("admin",)
    finally:
        await rig.stop()


async def test_a_message_from_a_server_the_bot_has_not_seen_yet_still_arrives(
        server: DiscordFakeServer, tmp_path: Path) -> None:
    """Without its GUILD_CREATE discord.py knows none of the server's roles: the message goes on without groups."""
    rig = ChannelRig(Driver(server, {"admin": [f"group:{OPS}"]}), tmp_path / "home")
    await rig.start()
    try:
        payload = await _say(rig, server, "1001", "hello", roles=[OPS])
        assert payload["message"] == "hello" and "senderGroups" not in payload
    finally:
        await rig.stop()
