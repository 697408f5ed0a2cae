"""The key scheduler."""

from __future__ import annotations

from pathlib import Path

import pytest

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


class _Away(Exception):
    """A storage error of the kind a backend names in its `storage_errors` (a database connection ended)."""


class _FlakyLocks:
    """Locks whose storage refuses the first `failures` calls with `error`, then grants everything."""

    def __init__(self, failures: int, error: type[Exception] = _Away):
        self.failures = failures
        self.error = error
        self.held: set[str] = set()

    def _maybe_fail(self) -> None:
        if self.failures > 0:
            self.failures -= 1
            raise self.error("the connection was ended by the server")

    def acquire(self, resource: str) -> bool:
        self._maybe_fail()
        self.held.add(resource)
        return True

    def release(self, resource: str) -> None:
        self._maybe_fail()
        self.held.discard(resource)


def test_a_lock_the_storage_refuses_leaves_the_message_to_start_at_the_next_look() -> None:
    locks = _FlakyLocks(failures=1)
    scheduler: KeyScheduler[str] = KeyScheduler(max_concurrency=4, locks=locks, lock_errors=(_Away,))
    scheduler.add((1, "a"), ("conv:x",), "first")
    scheduler.add((2, "b"), ("conv:x",), "second")
    assert list(scheduler.ready()) == [] and scheduler.contended
    assert [item for _, item in scheduler.ready()] == ["first"]
    scheduler.finish(("conv:x",))
    assert [item for _, item in scheduler.ready()] == ["second"]


def test_an_unexpected_lock_error_loses_no_message() -> None:
    scheduler: KeyScheduler[str] = KeyScheduler(max_concurrency=4, locks=_FlakyLocks(1, RuntimeError))
    scheduler.add((1, "a"), ("conv:x",), "only")
    with pytest.raises(RuntimeError):
        list(scheduler.ready())
    assert [item for _, item in scheduler.ready()] == ["only"]


def test_a_release_the_storage_refuses_still_frees_the_key() -> None:
    locks = _FlakyLocks(failures=0)
    scheduler: KeyScheduler[str] = KeyScheduler(max_concurrency=4, locks=locks, lock_errors=(_Away,))
    scheduler.add((1, "a"), ("conv:x", "run:r"), "first")
    assert [item for _, item in scheduler.ready()] == ["first"]
    scheduler.add((2, "b"), ("run:r",), "second")
    locks.failures = 1
    scheduler.finish(("conv:x", "run:r"))
    assert [item for _, item in scheduler.ready()] == ["second"]


class _TableLocks:
    """Locks of one holder in a table shared with others (`owners`: resource -> holder)."""

    def __init__(self, owners: dict[str, str], holder: str):
        self.owners, self.holder = owners, holder

    def acquire(self, resource: str) -> bool:
        return self.owners.setdefault(resource, self.holder) == self.holder

    def release(self, resource: str) -> None:
        if self.owners.get(resource) == self.holder:
            del self.owners[resource]


def test_a_lock_lost_while_it_could_not_be_renewed_is_taken_again_before_the_next_message() -> None:
    owners: dict[str, str] = {}
    scheduler: KeyScheduler[str] = KeyScheduler(max_concurrency=4, locks=_TableLocks(owners, "here"))
    scheduler.add((1, "a"), ("conv:x",), "first")
    scheduler.add((2, "b"), ("conv:x",), "second")
    assert [item for _, item in scheduler.ready()] == ["first"]
    owners["conv:x"] = "there"  # expired while the database was away, and taken over
    scheduler.lost_locks({"conv:x"})
    scheduler.finish(("conv:x",))
    assert list(scheduler.ready()) == [] and scheduler.contended, "another process holds the key now"
    del owners["conv:x"]
    assert [item for _, item in scheduler.ready()] == ["second"] and owners == {"conv:x": "here"}
