"""The platform-group lookup every channel shares (gateway/channelkit/groups.py): an answer is used until it is
CACHE_TTL_S old, two messages asking at once share one call, a stalled call answers None within the timeout and
its late answer is still kept, and `senderGroups` is set only when there are groups."""

from __future__ import annotations

import asyncio

from gateway.channelkit.groups import GroupLookup, with_groups
from gateway.models import IncomingPayload


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_an_answer_is_cached_for_its_ttl_and_asked_again_after() -> None:
    calls: list[str] = []

    async def fetch(key: str) -> list[str]:
        calls.append(key)
        return [f"{key}-{len(calls)}"]

    clock = Clock()
    lookup: GroupLookup[str, list[str]] = GroupLookup("{key}", fetch, ttl_s=60, clock=clock)
    assert await lookup.get("chat") == ["chat-1"]
    clock.now = 59
    assert await lookup.get("chat") == ["chat-1"]
    clock.now = 61
    assert await lookup.get("chat") == ["chat-2"] and calls == ["chat", "chat"]


async def test_messages_asking_at_once_share_one_call() -> None:
    release = asyncio.Event()
    calls = 0

    async def fetch(key: str) -> int:
        nonlocal calls
        calls += 1
        await release.wait()
        return 7

    lookup: GroupLookup[str, int] = GroupLookup("{key}", fetch)
    waiting = [asyncio.create_task(lookup.get("chat")) for _ in range(3)]
    await asyncio.sleep(0)
    release.set()
    assert await asyncio.gather(*waiting) == [7, 7, 7] and calls == 1


async def test_a_stalled_call_answers_none_in_time_and_its_late_answer_is_kept() -> None:
    release = asyncio.Event()
    calls = 0

    async def fetch(key: str) -> int:
        nonlocal calls
        calls += 1
        await release.wait()
        return 7

    lookup: GroupLookup[str, int] = GroupLookup("{key}", fetch, timeout_s=0.05)
    assert await lookup.get("chat") is None
    release.set()
    for _ in range(5):
        await asyncio.sleep(0)
    assert await lookup.get("chat") == 7 and calls == 1


def test_sender_groups_are_set_only_when_there_are_some() -> None:
    payload = IncomingPayload(channel="console", sender="a", message="hi", timestamp=1, messageId="m")
    assert with_groups(payload, []) is payload
    assert (with_groups(payload, ["b", "a", "a"]).model_extra or {})["senderGroups"] == ["a", "b"]
