"""A reply's buttons: the numbered list channels without buttons show, and the part that carries them."""

from __future__ import annotations

from typing import Any

from gateway.channelkit.buttons import how_to_answer, numbered
from gateway.channelkit.delivery import reply_parts
from gateway.models import Button, OutgoingPayload

ALLOW, DENY, ALWAYS = Button("ap:k3j9x2:0", "Allow"), Button("ap:k3j9x2:1", "Deny"), Button("ap:k3j9x2:2", "Always")


def reply(text: str, buttons: list[Button], **fields: Any) -> OutgoingPayload:
    return OutgoingPayload(channel="x", message=text, timestamp=1, messageId="m1", conversationId="c1",
                           buttons=[{"id": b.id, "label": b.label} for b in buttons], **fields)


def test_the_numbered_list_follows_the_text_and_says_how_to_answer() -> None:
    assert numbered("Run `make clean`?", [ALLOW, DENY, ALWAYS]) == (
        "Run `make clean`?\n\n1. Allow\n2. Deny\n3. Always\nReply 1, 2 or 3")


def test_how_to_answer_reads_naturally_for_any_count() -> None:
    assert [how_to_answer(n) for n in (1, 2, 4)] == ["Reply 1", "Reply 1 or 2", "Reply 1, 2, 3 or 4"]


def test_without_buttons_the_text_is_unchanged() -> None:
    assert numbered("plain", []) == "plain"


def test_a_channel_without_buttons_gets_the_numbered_list_in_its_last_chunk() -> None:
    text = "\n\n".join("x" * 60 for _ in range(3))
    parts = reply_parts(reply(text, [ALLOW, DENY]), 100)
    assert len(parts) >= 2 and all(part.buttons == () for part in parts)
    assert parts[-1].text is not None and parts[-1].text.endswith("1. Allow\n2. Deny\nReply 1 or 2")


def test_a_channel_with_buttons_gets_them_on_the_last_text_chunk_only() -> None:
    text = "\n\n".join("x" * 60 for _ in range(3))
    parts = reply_parts(reply(text, [ALLOW, DENY], files=["/tmp/report.txt"]), 100, shows_buttons=True)
    texts = [part for part in parts if part.text is not None]
    assert [part.buttons for part in texts] == [()] * (len(texts) - 1) + [(ALLOW, DENY)]
    assert "Reply" not in "".join(part.text or "" for part in texts)
    assert parts[-1].file is not None and parts[-1].buttons == ()


def test_buttons_without_text_still_make_a_message_to_carry_them() -> None:
    parts = reply_parts(reply("", [ALLOW, DENY]), 100, shows_buttons=True)
    assert [(part.text, part.buttons) for part in parts] == [("1. Allow\n2. Deny", (ALLOW, DENY))]


def test_an_id_longer_than_64_bytes_falls_back_to_the_numbered_list() -> None:
    long = Button("ap:" + "é" * 40, "Allow")
    parts = reply_parts(reply("Go?", [long, DENY]), 100, shows_buttons=True)
    assert [(part.text, part.buttons) for part in parts] == [("Go?\n\n1. Allow\n2. Deny\nReply 1 or 2", ())]
