"""The key scheduler."""

from __future__ import annotations

from pathlib import Path

from gateway.disk.locks import LockDirectory
from gateway.runtime.keys import KeyScheduler


def test_same_key_starts_in_claim_order_one_at_a_time() -> None:
    scheduler: KeyScheduler[str] = KeyScheduler(max_concurrency=8)
    scheduler.add((2, "b"), ("conv:x",), "second")
    scheduler.add((1, "a"), ("conv:x",), "first")
    assert [item for _, item in scheduler.ready()] == ["first"]
    assert list(scheduler.ready()) == []
    scheduler.finish(("conv:x",))
    assert [item for _, item in scheduler.ready()] == ["second"]


def test_independent_keys_start_together_up_to_the_limit() -> None:
    scheduler: KeyScheduler[str] = KeyScheduler(max_concurrency=2)
    for index, key in enumerate(("conv:a", "conv:b", "conv:c")):
        scheduler.add((index, key), (key,), key)
    assert [item for _, item in scheduler.ready()] == ["conv:a", "conv:b"]
    scheduler.finish(("conv:a",))
    assert [item for _, item in scheduler.ready()] == ["conv:c"]


def test_a_later_message_never_overtakes_an_earlier_one_sharing_any_key() -> None:
    scheduler: KeyScheduler[str] = KeyScheduler(max_concurrency=8)
    scheduler.add((1, "a"), ("run:r", "conv:x"), "run message")
    scheduler.add((2, "b"), ("conv:x",), "same conversation")
    scheduler.add((3, "c"), ("conv:y",), "other conversation")
    assert [item for _, item in scheduler.ready()] == ["run message", "other conversation"]


def test_a_held_place_blocks_its_keys_until_the_retry_is_claimed() -> None:
    scheduler: KeyScheduler[str] = KeyScheduler(max_concurrency=8)
    scheduler.hold((1, "a"), ("conv:x",))
    scheduler.add((2, "b"), ("conv:x",), "later")
    assert list(scheduler.ready()) == []
    scheduler.add((1, "a"), ("conv:x",), "retried")
    assert [item for _, item in scheduler.ready()] == ["retried"]
    scheduler.finish(("conv:x",))
    assert [item for _, item in scheduler.ready()] == ["later"]


def test_releasing_a_hold_unblocks_the_key() -> None:
    scheduler: KeyScheduler[str] = KeyScheduler(max_concurrency=8)
    scheduler.hold((1, "a"), ("conv:x",))
    scheduler.add((2, "b"), ("conv:x",), "later")
    scheduler.release_hold((1, "a"))
    assert [item for _, item in scheduler.ready()] == ["later"]


def test_sharing_locks_the_keys_of_claimed_messages_not_yet_started(tmp_path: Path) -> None:
    scheduler: KeyScheduler[str] = KeyScheduler(max_concurrency=1)
    scheduler.add((1, "a"), ("conv:x",), "running")
    scheduler.add((2, "b"), ("conv:y",), "claimed, waiting for a slot")
    assert [item for _, item in scheduler.ready()] == ["running"]
    assert scheduler.lock_running(LockDirectory(tmp_path, holder="lone"))
    other = LockDirectory(tmp_path, holder="other")
    assert not other.acquire("conv:x") and not other.acquire("conv:y")
