"""The queue's guarantees (spec 002, DESIGN "ordering"), written once for every backend's QueueStore:
claimed oldest first, a retry keeps its place, FIFO per key through retries, other keys go on in
parallel, and nothing is lost whichever step a handle stops after."""

from __future__ import annotations

import json
import threading

import pytest

from gateway.stores import QueueStore
from gateway.testing import wait_until
from tests.contract.backends import Backend


def message(key: str, n: int) -> bytes:
    return json.dumps({"key": key, "n": n}).encode()


def keys_of(data: bytes) -> tuple[str, ...]:
    return (json.loads(data)["key"],)


def label(data: bytes) -> str:
    parsed = json.loads(data)
    return f"{parsed['key']}{parsed['n']}"


def opened(backend: Backend, worker: str) -> QueueStore:
    queue = backend.queue(worker)
    queue.open()
    return queue


def take_in(queue: QueueStore, *labels: str) -> None:
    for text in labels:
        queue.enqueue(message(text[0], int(text[1:])), hint=text)
    queue.rescan()


def test_payloads_are_claimed_oldest_first_and_a_retry_keeps_its_place(backend: Backend) -> None:
    queue = opened(backend, "w1")
    take_in(queue, "a1", "b1", "a2")
    first = queue.claim()
    assert first is not None and label(first.data) == "a1"
    assert queue.requeue(first, "boom", 0.0) == 1
    again = queue.claim()
    assert again is not None and label(again.data) == "a1", "a retried payload goes back to its place, not last"
    assert again.attempts == 1 and again.errors == ["boom"]
    queue.complete(again)
    rest = []
    while (claimed := queue.claim()) is not None:
        rest.append(label(claimed.data))
        queue.complete(claimed)
    assert rest == ["b1", "a2"]
    queue.close()


def test_fifo_per_key_through_retries_while_other_keys_go_on(backend: Backend) -> None:
    """a1 fails and backs off; meanwhile b1 runs, a2 waits (its key's older message waits); once a1 is
    due it runs before a2. The key's holding is the caller's (the worker's KeyScheduler); the queue
    keeps a refused payload in its place and puts a retried one back in its place."""
    queue = opened(backend, "w1")
    take_in(queue, "a1", "b1", "a2")
    backing_off: set[str] = set()

    def admit(keys: tuple[str, ...]) -> bool:
        return not backing_off.intersection(keys)

    a1 = queue.claim_admitted(keys_of, admit)
    assert a1 is not None and label(a1.data) == "a1"
    queue.requeue(a1, "boom", 0.3)
    backing_off.add("a")
    done = []
    while (claimed := queue.claim_admitted(keys_of, admit)) is not None:
        done.append(label(claimed.data))
        queue.complete(claimed)
    queue.end_pass()
    assert done == ["b1"], "a2 must not overtake a1 while a1 backs off"
    wait_until(lambda: queue.next_due_in() in (None, 0.0))
    backing_off.clear()
    while (claimed := queue.claim_admitted(keys_of, admit)) is not None:
        done.append(label(claimed.data))
        queue.complete(claimed)
    assert done == ["b1", "a1", "a2"]
    queue.close()


def test_two_handles_run_different_keys_at_once_and_never_one_payload_twice(backend: Backend) -> None:
    first, second = opened(backend, "w1"), opened(backend, "w2")
    take_in(first, "a1", "a2", "b1")
    second.rescan()
    running: set[str] = set()  # the keys held by either handle (the cross-process key locks)

    def admit(keys: tuple[str, ...]) -> bool:
        if running.intersection(keys):
            return False
        running.update(keys)
        return True

    on_first = first.claim_admitted(keys_of, admit)
    on_second = second.claim_admitted(keys_of, admit)
    assert on_first is not None and label(on_first.data) == "a1"
    assert on_second is not None and label(on_second.data) == "b1", "key b goes on while key a runs elsewhere"
    assert second.claim_admitted(keys_of, admit) is None, "a2 waits for a1, on every handle"
    second.end_pass()
    first.complete(on_first)
    running.discard("a")
    last = second.claim_admitted(keys_of, admit)
    assert last is not None and label(last.data) == "a2"
    assert first.claim() is None and second.claim() is None
    for queue in (first, second):
        queue.close()


def test_handles_starting_and_claiming_at_once_never_claim_one_payload_twice(backend: Backend) -> None:
    """Processes sharing a home start at the same moment (each recovering what dead ones left) and claim
    together: each payload is claimed by exactly one, and no start fails."""
    take_in(opened(backend, "feeder"), *(f"k{n}" for n in range(200)))
    workers = [f"w{n}" for n in range(4)]
    claimed: dict[str, list[str]] = {worker: [] for worker in workers}
    failed: list[BaseException] = []
    start = threading.Barrier(len(workers))

    def drain(worker: str) -> None:
        try:
            start.wait()
            queue = opened(backend, worker)
            queue.rescan()
            while (found := queue.claim()) is not None:
                claimed[worker].append(label(found.data))
                queue.complete(found)
            queue.close()
        except BaseException as exc:  # reported below, with the claims
            failed.append(exc)

    threads = [threading.Thread(target=drain, args=(worker,)) for worker in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failed == []
    everything = [name for worker in workers for name in claimed[worker]]
    assert sorted(everything) == sorted(f"k{n}" for n in range(200)), "each payload claimed exactly once"


@pytest.mark.parametrize("stop_after", ["take in", "claim", "requeue", "claim again", "dead letter"])
def test_no_payload_is_lost_whichever_step_a_handle_stops_after(backend: Backend, stop_after: str) -> None:
    """A handle stops (a process dies) after one step; the next handle to open finds every payload
    either waiting in its place, with the attempts counted so far, or dead: never gone, never twice."""
    queue = opened(backend, "w1")
    take_in(queue, "a1", "a2")
    steps = ["take in", "claim", "requeue", "claim again", "dead letter"]
    claimed = None
    for step in steps[1:steps.index(stop_after) + 1]:
        if step in ("claim", "claim again"):
            claimed = queue.claim()
            assert claimed is not None
        elif step == "requeue":
            assert claimed is not None
            queue.requeue(claimed, "boom", 0.0)
        else:
            assert claimed is not None
            queue.dead_letter(claimed, "gave up")
    queue.close()  # stops without completing what it claimed
    queue = opened(backend, "w2")
    waiting = [(label(data), attempts) for data, attempts in backend.queued()]
    dead = [label(backend.dead_letters().show(letter.name)[1]) for letter in backend.dead_letters().list_dead()]
    counted = 1 if stop_after in ("requeue", "claim again") else 0
    if stop_after == "dead letter":
        assert (waiting, dead) == ([("a2", 0)], ["a1"])
    else:
        assert (waiting, dead) == ([("a1", counted), ("a2", 0)], [])
    queue.close()
