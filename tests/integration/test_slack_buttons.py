"""Slack's one-tap answers against the fake Slack, in both modes: an actions block under the reply, a tap
(block_actions) acknowledged at once, taken in from its thread, and its message marked answered."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway import OutgoingPayload
from gateway.testing import async_wait_until
from gateway.testing.conformance import BUTTONS, ChannelRig, reply
from plugins.slack.channel import NOT_YOURS, SlackChannel
from tests.fakes.slack_server import FakeSlack
from tests.integration.test_slack import APP_ENV, BOT_ENV, CHANNEL, SECRET_ENV, SlackDriver

pytestmark = pytest.mark.timeout(60)
THREAD = f"{CHANNEL}:1699.000100"


@pytest.fixture
async def server(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        monkeypatch.setenv(BOT_ENV, fake.bot_token)
        monkeypatch.setenv(APP_ENV, fake.app_token)
        monkeypatch.setenv(SECRET_ENV, fake.signing_secret)
        yield fake


@pytest.fixture(params=["socket", "http"])
def driver(request: pytest.FixtureRequest, server: FakeSlack) -> SlackDriver:
    return SlackDriver(server, str(request.param), pairing=True)


@pytest.fixture
async def rig(driver: SlackDriver, tmp_path: Path) -> AsyncIterator[ChannelRig]:
    started = ChannelRig(driver, tmp_path / "home", allow_from=["1001"])
    await started.start()
    yield started
    await started.stop()


async def ask(rig: ChannelRig, conversation: str = THREAD) -> None:
    assert isinstance(rig.channel, SlackChannel)
    await rig.channel.send(reply("Allow `make clean`?", conversation, channel="slack", buttons=BUTTONS))


async def test_the_buttons_are_an_actions_block_under_the_text(rig: ChannelRig, server: FakeSlack) -> None:
    await ask(rig)
    [message] = server.messages.values()
    assert message["text"] == "Allow `make clean`?" and message["thread_ts"] == "1699.000100"
    section, actions = message["blocks"]
    assert section["text"]["text"] == "Allow `make clean`?"
    assert [(b["action_id"], b["value"], b["text"]["text"]) for b in actions["elements"]] == [
        ("ap:k3j9x2:0", "ap:k3j9x2:0", "Allow"), ("ap:k3j9x2:1", "ap:k3j9x2:1", "Deny")]


async def test_a_tap_in_a_thread_is_acknowledged_taken_in_there_and_marked_answered(
    rig: ChannelRig, driver: SlackDriver, server: FakeSlack
) -> None:
    await ask(rig)
    began = time.monotonic()
    tap = await driver.user_taps("ap:k3j9x2:1")
    assert time.monotonic() - began < 3.0  # Slack wants the ack within 3 s
    if driver.mode == "socket":
        assert len(server.acks) == 1 and server.acks[0]["envelope_id"]
    [payload] = await async_wait_until(rig.incoming)
    assert (payload["conversationId"], payload["button"], payload["message"]) == (THREAD, "ap:k3j9x2:1", "Deny")
    assert payload["messageId"] == f"tap:{tap['trigger_id']}"
    await async_wait_until(lambda: server.edits)
    [message] = server.messages.values()
    assert [block["type"] for block in message["blocks"]] == ["section", "context"]
    assert message["blocks"][-1]["elements"][0]["text"] == "answered: Deny (<@1001>)"


async def test_a_tap_from_an_unknown_sender_gets_a_pairing_code_only_they_see(
    rig: ChannelRig, driver: SlackDriver, server: FakeSlack
) -> None:
    await ask(rig, CHANNEL)
    await driver.user_taps("ap:k3j9x2:0", sender_id="U666", sender="Eve")
    assert rig.context is not None
    queued = await async_wait_until(lambda: list(rig.context.home.outgoing.glob("*.json")))  # type: ignore[union-attr]
    answer = OutgoingPayload.model_validate(json.loads(queued[0].read_bytes()))
    assert isinstance(rig.channel, SlackChannel)
    await rig.channel.send(answer)
    assert [(c, user) for c, user, _ in server.ephemeral] == [(CHANNEL, "U666")]
    assert rig.incoming() == [] and server.edits == []


async def test_a_tap_from_a_sender_not_allowed_is_told_only_to_them(
    server: FakeSlack, tmp_path: Path
) -> None:
    driver = SlackDriver(server, "socket")
    rig = ChannelRig(driver, tmp_path / "home", allow_from=["1001"])
    await rig.start()
    try:
        await ask(rig, CHANNEL)
        await driver.user_taps("ap:k3j9x2:0", sender_id="U666", sender="Eve")
        told = await async_wait_until(lambda: server.ephemeral)
        assert told == [(CHANNEL, "U666", NOT_YOURS)]
        assert rig.incoming() == [] and server.edits == []
    finally:
        await rig.stop()
