"""The delivery journal (DESIGN "delivery"): a reply's parts are sent once each across a takeover. The
first host sends part 1 and dies before part 2; the host that takes over sees part 1 recorded and sends
only the rest; once delivered, the record is gone."""

from __future__ import annotations

import pytest

from gateway.channelkit.delivery import Part, deliver_parts, delivery_key
from gateway.models import OutgoingPayload
from tests.contract.backends import Backend

REPLY = OutgoingPayload.model_validate({"channel": "console", "message": "one two three", "timestamp": 1,
                                        "messageId": "m1", "conversationId": "c1"})
PARTS = [Part(index, text) for index, text in enumerate(["one", "two", "three"])]


class Died(Exception):
    """The sending host stopped."""


async def test_each_part_is_sent_once_across_a_takeover(backend: Backend) -> None:
    sent: list[str] = []

    async def dies_after_one(part: Part) -> str:
        if sent:
            raise Died()
        sent.append(part.text)
        return f"platform-{part.index}"

    backend.reply_waiting(REPLY)
    first, second = backend.journal(), backend.journal()
    with pytest.raises(Died):
        await deliver_parts(REPLY, PARTS, dies_after_one, first)
    assert second.sent_parts(delivery_key(REPLY)) == {0: "platform-0"}

    async def sends(part: Part) -> str:
        sent.append(part.text)
        return f"platform-{part.index}"

    record = await deliver_parts(REPLY, PARTS, sends, second)
    assert sent == ["one", "two", "three"], "no part sent twice, none left out"
    assert record.platform_ids == ["platform-0", "platform-1", "platform-2"]
    assert first.sent_parts(delivery_key(REPLY)) == {}, "a delivered reply's record is dropped"
