"""TTL locks (spec 001): one holder per resource on every handle, released or renewed by its holder only,
taken over once it expires."""

from __future__ import annotations

import threading
import time

from gateway.testing import wait_until
from tests.contract.backends import Backend


def test_one_holder_per_resource_until_released(backend: Backend) -> None:
    first, second = backend.locks("host-a:1", 60), backend.locks("host-b:2", 60)
    assert first.acquire("conv:c1")
    assert first.acquire("conv:c1"), "the holder takes its own lock again"
    assert not second.acquire("conv:c1")
    assert second.acquire("conv:c2"), "another resource is free"
    second.release("conv:c1")  # not its lock: nothing happens
    assert not second.acquire("conv:c1")
    first.release("conv:c1")
    assert second.acquire("conv:c1")
    assert not first.acquire("conv:c1")
    assert first.reclaimed == 0 and second.reclaimed == 0


def test_an_expired_lock_is_taken_over_and_a_renewed_one_is_not(backend: Backend) -> None:
    first, second = backend.locks("host-a:1", 0.8), backend.locks("host-b:2", 0.8)
    assert first.acquire("kept") and first.acquire("left")
    taken = time.monotonic()
    while time.monotonic() - taken < 1.0:  # renewed well within its TTL, "kept" never expires
        first.renew(["kept"])
        assert not second.acquire("kept")
        time.sleep(0.1)
    assert second.acquire("left"), "the lock not renewed expired"
    assert second.reclaimed == 1
    assert not first.acquire("left")
    first.release("kept")
    assert second.acquire("kept")


def test_clean_expired_frees_only_expired_locks(backend: Backend) -> None:
    short, long = backend.locks("host-a:1", 0.3), backend.locks("host-b:2", 60)
    assert short.acquire("brief") and long.acquire("lasting")
    wait_until(lambda: "brief" in long.clean_expired(), timeout_s=5)
    assert long.clean_expired() == []
    assert not backend.locks("host-c:3", 60).acquire("lasting")


def test_holders_racing_for_a_free_lock_leave_one_holder(backend: Backend) -> None:
    start = threading.Barrier(6)
    won: list[str] = []

    def race(holder: str) -> None:
        locks = backend.locks(holder, 60)
        start.wait()
        if locks.acquire("conv:c1"):
            won.append(holder)

    threads = [threading.Thread(target=race, args=(f"host-{n}:{n}",)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1
    assert not backend.locks("host-late:9", 60).acquire("conv:c1")
