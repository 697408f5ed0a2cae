"""gateway/scope.py: a conversation's scope is spelt as it always was (stored strings stay the same), and
reads back from that spelling."""

from __future__ import annotations

import pytest

from gateway.scope import ConversationScope
from gateway.testing import make_incoming


def test_a_message_s_scope_is_spelt_as_stored() -> None:
    scope = ConversationScope.of(make_incoming(channel="telegram", channelProfileId="tg", conversationId="-100"))
    assert (scope.key, str(scope), scope.path) == ("conv:telegram/tg/-100", "conv:telegram/tg/-100", "telegram/tg/-100")


def test_a_message_without_a_profile_or_conversation_falls_back_as_its_payload_does() -> None:
    scope = ConversationScope.of(make_incoming(channel="console", conversationId=None, senderId="42"))
    assert scope == ConversationScope("console", "console", "42")


@pytest.mark.parametrize("conversation", ["c1", "thread/123", "c1#session-2", ""])
def test_a_scope_reads_back_from_its_spelling(conversation: str) -> None:
    scope = ConversationScope("slack", "work", conversation)
    assert ConversationScope.parse(scope.key) == scope


@pytest.mark.parametrize("text", ["run:r-20260101-000000-abcd1234", "ctl:console/console/c1", "conv:console",
                                  "console/console/c1"])
def test_what_is_no_conversation_scope_parses_to_none(text: str) -> None:
    assert ConversationScope.parse(text) is None
