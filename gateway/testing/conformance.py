"""The channel conformance kit: the same contract checks, run against any channel plugin and its fake server.

A plugin's test module provides a `driver` fixture yielding a ChannelDriver for its fake server
and subclasses ChannelConformance; pytest then runs every check below against that plugin:

    class TestMyChannel(ChannelConformance):
        @pytest.fixture
        async def driver(self):
            async with MyFakeServer() as server:
                yield MyDriver(server)

Checks: inbound payload shape and atomic write, outbound text, splitting at the platform limit
with code fences intact, files both ways, a 429 then success, no duplicate after a restart in
the middle of a delivery, the bot's own messages ignored, a sender outside `allow_from` ignored,
a message the gateway cannot store answered with a clear reply (unless the platform redelivers it),
a permanent refusal by the platform (bot blocked or removed, chat gone) raised as PermanentError,
a reply's buttons shown under it (a channel declaring `shows_buttons`) or as a numbered list, and,
where the driver `supports_buttons`, a tap arriving as a payload with `button`, refused from a sender
outside `allow_from`, and the same messageId when the platform delivers a tap again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.api import INTAKE_FAILED_REPLY, PermanentError
from gateway.home import SPARE_PREFIX
from gateway.telemetry.events import now_ms
from gateway.testing import async_wait_until
from gateway.testing.rig import (
    BUTTONS,
    ChannelDriver,
    ChannelRig,
    SentItem,
    reply,
    send_like_the_dispatcher,
)

__all__ = ["BUTTONS", "ChannelConformance", "ChannelDriver", "ChannelRig", "SentItem", "reply",
           "send_like_the_dispatcher"]


class ChannelConformance:
    """The contract every channel plugin meets; subclass it and provide a `driver` fixture."""

    @pytest.fixture
    async def rig(self, driver: ChannelDriver, tmp_path: Path) -> AsyncIterator[ChannelRig]:
        rig = ChannelRig(driver, tmp_path / "home")
        await rig.start()
        yield rig
        await rig.stop()

    async def test_inbound_message_becomes_a_complete_payload(self, rig: ChannelRig, driver: ChannelDriver) -> None:
        before = now_ms()
        await driver.user_says("hello there", sender_id="1001", sender="Ada")
        payload = (await async_wait_until(rig.incoming))[0]
        assert payload["channel"] == driver.type
        assert payload["channelProfileId"] == "conformance"
        assert payload["message"] == "hello there"
        assert payload["senderId"] == "1001" and payload["sender"]
        assert payload["messageId"] and payload["conversationId"]
        assert before - 60_000 <= payload["timestamp"] <= now_ms() + 60_000
        assert rig.context is not None
        half_written = [p for p in rig.context.home.incoming.glob("*.tmp") if not p.name.startswith(SPARE_PREFIX)]
        assert not half_written  # (the queue's own spare file, kept ready for the next write, is not one)

    async def test_outgoing_text_reaches_the_conversation(self, rig: ChannelRig, driver: ChannelDriver) -> None:
        assert rig.channel is not None
        await send_like_the_dispatcher(rig.channel, reply("the answer", driver.conversation, channel=driver.type))
        sent = await async_wait_until(driver.sent)
        assert [item.text for item in sent] == ["the answer"]
        assert sent[0].conversation == driver.conversation

    async def test_long_text_is_split_at_the_limit_keeping_code_fences(
        self, rig: ChannelRig, driver: ChannelDriver
    ) -> None:
        if not driver.splits_text:
            pytest.skip(f"{driver.type} has no length limit")
        assert rig.channel is not None
        code = "\n".join(f"value_{i} = {i}" for i in range(driver.limit // 6))
        text = f"Result:\n```python\n{code}\n```\nThat is all."
        await send_like_the_dispatcher(rig.channel, reply(text, driver.conversation, channel=driver.type))
        texts = [item.text or "" for item in driver.sent()]
        assert len(texts) >= 2
        assert all(len(t) <= driver.limit for t in texts)
        assert all(t.count("```") % 2 == 0 for t in texts)
        assert texts[-1].endswith("That is all.")

    async def test_files_travel_both_ways(self, rig: ChannelRig, driver: ChannelDriver, tmp_path: Path) -> None:
        if not driver.supports_files:
            pytest.skip(f"{driver.type} carries no files")
        await driver.user_says("see attached", file=("notes.txt", b"inbound bytes"))
        payload = (await async_wait_until(rig.incoming))[0]
        assert len(payload["files"]) == 1
        saved = Path(payload["files"][0])
        assert saved.is_absolute() and saved.read_bytes() == b"inbound bytes"
        assert f"[file: {saved}]" in payload["message"]
        outbound = tmp_path / "report.txt"
        outbound.write_bytes(b"outbound bytes")
        assert rig.channel is not None
        await send_like_the_dispatcher(
            rig.channel, reply("here you go", driver.conversation, channel=driver.type, files=[str(outbound)]))
        files = [item for item in await async_wait_until(driver.sent) if item.filename]
        assert [(f.filename, f.data) for f in files] == [("report.txt", b"outbound bytes")]

    async def test_rate_limit_is_waited_out_and_nothing_is_dropped(
        self, rig: ChannelRig, driver: ChannelDriver
    ) -> None:
        if not driver.supports_rate_limit:
            pytest.skip(f"{driver.type} has no rate limits")
        driver.rate_limit_next(1, retry_after=0.2)
        assert rig.channel is not None
        await send_like_the_dispatcher(rig.channel, reply("patience", driver.conversation, channel=driver.type))
        assert [item.text for item in driver.sent()] == ["patience"]

    async def test_restart_mid_delivery_sends_no_duplicate(
        self, rig: ChannelRig, driver: ChannelDriver, tmp_path: Path
    ) -> None:
        if not driver.supports_rate_limit:
            pytest.skip(f"{driver.type} has no failing platform to interrupt")
        text = "\n\n".join(f"paragraph {i} " + "x" * (driver.limit // 2) for i in range(3))
        outgoing = reply(text, driver.conversation, channel=driver.type)
        driver.fail_next(1, after=1)
        assert rig.channel is not None
        with pytest.raises(Exception):  # noqa: B017 - the platform error surfaces in whatever form
            await rig.channel.send(outgoing)
        await rig.stop()
        restarted = ChannelRig(driver, rig.root)
        await restarted.start()
        assert restarted.channel is not None
        await send_like_the_dispatcher(restarted.channel, outgoing)
        await restarted.stop()
        texts = [item.text for item in driver.sent()]
        assert len(texts) == 3 and len(set(texts)) == 3
        assert [t.split(" ")[1] for t in texts if t] == ["0", "1", "2"]

    async def test_own_messages_are_ignored(self, rig: ChannelRig, driver: ChannelDriver) -> None:
        if not driver.supports_own_messages:
            pytest.skip(f"{driver.type} has no messages of its own")
        await driver.bot_says("I am the bot")
        await driver.user_says("I am a person")
        await async_wait_until(rig.incoming)
        assert [p["message"] for p in rig.incoming()] == ["I am a person"]

    async def test_a_sender_outside_allow_from_is_ignored(self, driver: ChannelDriver, tmp_path: Path) -> None:
        if not driver.supports_access_control:
            pytest.skip(f"{driver.type} has a single local user")
        rig = ChannelRig(driver, tmp_path / "allow", allow_from=["1001"])
        await rig.start()
        try:
            await driver.user_says("let me in", sender_id="666", sender="Mallory")
            await driver.user_says("hi, it's me", sender_id="1001", sender="Ada")
            await async_wait_until(rig.incoming)
            assert [p["message"] for p in rig.incoming()] == ["hi, it's me"]
        finally:
            await rig.stop()

    async def test_a_message_that_cannot_be_stored_gets_a_clear_reply(
        self, driver: ChannelDriver, tmp_path: Path
    ) -> None:
        if driver.redelivers_refused_messages:
            pytest.skip(f"{driver.type} delivers a refused message again")
        rig = ChannelRig(driver, tmp_path / "refusing", refuse_intake=True)
        await rig.start()
        try:
            await driver.user_says("are you there?")
            told = await async_wait_until(lambda: [item for item in driver.sent() if item.text == INTAKE_FAILED_REPLY])
            assert told[0].conversation == driver.conversation
            assert rig.incoming() == []
        finally:
            await rig.stop()

    async def test_a_permanent_refusal_is_not_retried(self, rig: ChannelRig, driver: ChannelDriver) -> None:
        if not driver.supports_refusal:
            pytest.skip(f"{driver.type} cannot refuse a message")
        driver.refuse_next()
        assert rig.channel is not None
        with pytest.raises(PermanentError):
            await rig.channel.send(reply("anyone there?", driver.conversation, channel=driver.type))
        await send_like_the_dispatcher(rig.channel, reply("still here", driver.conversation, channel=driver.type))
        assert [item.text for item in driver.sent()] == ["still here"]

    async def test_a_replys_buttons_are_shown_or_numbered(self, rig: ChannelRig, driver: ChannelDriver) -> None:
        assert rig.channel is not None
        await send_like_the_dispatcher(rig.channel, reply("Run `make clean`?", driver.conversation,
                                                          channel=driver.type, buttons=BUTTONS))
        last = (await async_wait_until(driver.sent))[-1]
        if getattr(rig.channel, "shows_buttons", False):
            assert (last.text, last.buttons) == ("Run `make clean`?", [(b["id"], b["label"]) for b in BUTTONS])
        else:
            assert last.text == "Run `make clean`?\n\n1. Allow\n2. Deny\nReply 1 or 2"

    async def test_a_tap_arrives_as_a_payload_with_the_button_and_its_label(
        self, rig: ChannelRig, driver: ChannelDriver
    ) -> None:
        if not driver.supports_buttons:
            pytest.skip(f"{driver.type} delivers no taps")
        await self._show_buttons(rig, driver)
        await driver.user_says("hello")
        await driver.user_taps("ap:k3j9x2:1")
        text, tap = await async_wait_until(lambda: rig.incoming() if len(rig.incoming()) == 2 else None)
        assert (tap["button"], tap["message"]) == ("ap:k3j9x2:1", "Deny")
        same = ("channel", "channelProfileId", "conversationId", "senderId", "sender")
        assert {key: tap[key] for key in same} == {key: text[key] for key in same}
        assert tap["messageId"] and tap["messageId"] != text["messageId"] and "button" not in text

    async def test_a_tap_from_a_sender_outside_allow_from_is_refused(
        self, driver: ChannelDriver, tmp_path: Path
    ) -> None:
        if not driver.supports_buttons:
            pytest.skip(f"{driver.type} delivers no taps")
        rig = ChannelRig(driver, tmp_path / "allow", allow_from=["1001"])
        await rig.start()
        try:
            await self._show_buttons(rig, driver)
            await driver.user_taps("ap:k3j9x2:0", sender_id="666", sender="Mallory")
            await driver.user_taps("ap:k3j9x2:1", sender_id="1001", sender="Ada")
            await async_wait_until(rig.incoming)
            assert [(p["senderId"], p["button"]) for p in rig.incoming()] == [("1001", "ap:k3j9x2:1")]
        finally:
            await rig.stop()

    async def test_a_tap_delivered_again_keeps_its_message_id(self, rig: ChannelRig, driver: ChannelDriver) -> None:
        if not driver.supports_buttons:
            pytest.skip(f"{driver.type} delivers no taps")
        await self._show_buttons(rig, driver)
        first = await driver.user_taps("ap:k3j9x2:0")
        await driver.tap_again(first)
        await self._show_buttons(rig, driver)  # (a platform may take the tapped buttons away)
        await driver.user_taps("ap:k3j9x2:0")  # a second tap of its own: a new message
        await async_wait_until(lambda: len({p["messageId"] for p in rig.incoming()}) >= 2)
        await driver.user_says("done")  # taken in after the taps: every tap is in by then
        await async_wait_until(lambda: any("button" not in p for p in rig.incoming()))
        taps = [p for p in rig.incoming() if "button" in p]
        assert len({p["messageId"] for p in taps}) == 2, taps  # the queue skips the repeated messageId

    async def _show_buttons(self, rig: ChannelRig, driver: ChannelDriver) -> None:
        assert rig.channel is not None
        await send_like_the_dispatcher(rig.channel, reply("Allow `make clean`?", driver.conversation,
                                                          channel=driver.type, buttons=BUTTONS))
