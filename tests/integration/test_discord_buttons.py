"""Discord's one-tap answers against the fake Discord: components under the reply, a tap (a component
interaction) answered by editing the message, refused taps told only to the tapper, and taps on a
message sent before a restart still taken in (dispatch by custom_id, nothing held in memory)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.testing import async_wait_until
from gateway.testing.conformance import BUTTONS, ChannelRig, reply, send_like_the_dispatcher
from plugins.discord.channel import DiscordChannel  # first: it imports discord.py without its audioop warning
from plugins.discord.inbound import NOT_YOURS
from tests.fakes.discord_server import DiscordFakeServer
from tests.integration.test_discord import DM, TOKEN_ENV, DiscordDriver

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def server(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[DiscordFakeServer]:
    async with DiscordFakeServer() as fake:
        monkeypatch.setenv(TOKEN_ENV, fake.token)
        yield fake


async def started(server: DiscordFakeServer, root: Path, **fields: list[str]) -> ChannelRig:
    rig = ChannelRig(DiscordDriver(server), root, **fields)
    await rig.start()
    assert isinstance(rig.channel, DiscordChannel)
    return rig


async def ask(rig: ChannelRig) -> None:
    assert rig.channel is not None
    await send_like_the_dispatcher(rig.channel, reply("Allow `make clean`?", DM, channel="discord", buttons=BUTTONS))


async def test_the_buttons_are_components_and_a_tap_edits_them_away(server: DiscordFakeServer, tmp_path: Path) -> None:
    rig = await started(server, tmp_path / "home")
    try:
        await ask(rig)
        [shown] = server.sent
        assert [(c["type"], [(b["custom_id"], b["label"]) for b in c["components"]])
                for c in shown.payload["components"]] == [(1, [("ap:k3j9x2:0", "Allow"), ("ap:k3j9x2:1", "Deny")])]
        interaction = server.interaction(DM, server.user("1001", "Ada"), "ap:k3j9x2:1")
        await server.dispatch("INTERACTION_CREATE", interaction)
        [tap] = await async_wait_until(rig.incoming)
        assert (tap["button"], tap["message"], tap["messageId"]) == ("ap:k3j9x2:1", "Deny", f"tap:{interaction['id']}")
        [(answered, body)] = await async_wait_until(lambda: server.responses)
        assert answered == interaction["id"] and body["type"] == 7  # UPDATE_MESSAGE: the interaction is answered
        data = body["data"]
        assert (data["content"], data["components"]) == ("Allow `make clean`?\n\nanswered: Deny", [])
    finally:
        await rig.stop()


async def test_a_tap_from_a_sender_not_allowed_is_told_only_to_them(server: DiscordFakeServer, tmp_path: Path) -> None:
    rig = await started(server, tmp_path / "home", allow_from=["1001"])
    try:
        await ask(rig)
        mallory = server.user("666", "Mallory")
        await server.dispatch("INTERACTION_CREATE", server.interaction(DM, mallory, "ap:k3j9x2:0"))
        [(_, body)] = await async_wait_until(lambda: server.responses)
        assert (body["type"], body["data"]["content"], body["data"]["flags"]) == (4, NOT_YOURS, 64)  # ephemeral
        assert rig.incoming() == []
    finally:
        await rig.stop()


async def test_a_tap_on_a_message_sent_before_a_restart_still_arrives(
    server: DiscordFakeServer, tmp_path: Path
) -> None:
    first = await started(server, tmp_path / "home")
    await ask(first)
    await first.stop()
    second = await started(server, tmp_path / "home")
    try:
        await server.dispatch("INTERACTION_CREATE", server.interaction(DM, server.user("1001", "Ada"), "ap:k3j9x2:0"))
        [tap] = await async_wait_until(second.incoming)
        assert (tap["button"], tap["message"]) == ("ap:k3j9x2:0", "Allow")
        await async_wait_until(lambda: server.responses)
    finally:
        await second.stop()
