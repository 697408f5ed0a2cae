"""Dedupe (spec 002): a message answered once is recognised as a repeat within the duplicate window, by
the process that answered it and the one that starts after it; not once the window passed, nor once
its answer was forgotten (a late dead letter, which `dead retry` must run again)."""

from __future__ import annotations

import threading
import time

from gateway.models import IncomingPayload
from gateway.testing import wait_until
from tests.contract.backends import Backend


def incoming(message_id: str, channel: str = "console") -> IncomingPayload:
    return IncomingPayload.model_validate({"channel": channel, "message": "hi", "timestamp": 1,
                                           "messageId": message_id, "senderId": "u1", "conversationId": "c1"})


def test_an_answered_message_is_a_repeat_within_the_window_after_a_restart_too(backend: Backend) -> None:
    index = backend.answered(window_sec=600)
    assert not index.contains(incoming("m1"))
    index.record(incoming("m1"))
    assert index.contains(incoming("m1"))
    assert not index.contains(incoming("m2")) and not index.contains(incoming("m1", channel="other"))
    assert backend.answered(window_sec=600).contains(incoming("m1")), "a restarted process skips the repeat"


def test_a_repeat_after_the_window_is_answered_again(backend: Backend) -> None:
    index = backend.answered(window_sec=0.6)
    index.record(incoming("m1"))
    recorded = time.monotonic()
    assert index.contains(incoming("m1"))
    wait_until(lambda: not index.contains(incoming("m1")), timeout_s=5)
    assert time.monotonic() - recorded >= 0.55


def test_a_forgotten_answer_is_run_again_after_a_restart_too(backend: Backend) -> None:
    index = backend.answered(window_sec=600)
    index.record(incoming("m1"))
    index.record(incoming("m2"))
    index.forget(incoming("m1"))
    assert not index.contains(incoming("m1")) and index.contains(incoming("m2"))
    reopened = backend.answered(window_sec=600)
    assert not reopened.contains(incoming("m1")) and reopened.contains(incoming("m2"))


def test_processes_sharing_a_home_see_each_others_answers(backend: Backend) -> None:
    """DESIGN: several workers may share one home; a repeat is skipped whichever of them claims it."""
    first, second = backend.answered(window_sec=600), backend.answered(window_sec=600)
    first.record(incoming("m1"))
    assert second.contains(incoming("m1")), "the repeat claimed by the other process is still a repeat"
    second.forget(incoming("m1"))
    assert not first.contains(incoming("m1")), "a forgotten answer is forgotten by every process"


def test_an_answer_recorded_after_another_process_started_is_kept(backend: Backend) -> None:
    """A process that starts while another runs (and compacts the record) loses none of the answers the
    other records afterwards: a third process, later, still skips their repeats."""
    first = backend.answered(window_sec=600)
    first.record(incoming("m1"))
    first.forget(incoming("m1"))  # something for the next one to compact away
    backend.answered(window_sec=600)
    first.record(incoming("m2"))
    assert backend.answered(window_sec=600).contains(incoming("m2"))


def test_no_answer_is_lost_while_other_processes_start_and_compact(backend: Backend) -> None:
    writer = backend.answered(window_sec=600)
    writer.record(incoming("gone"))
    done = threading.Event()

    def answer_many() -> None:
        for number in range(300):
            writer.record(incoming(f"m{number}"))
            if number % 10 == 0:
                writer.forget(incoming(f"m{number}"))  # leaves lines a starting process compacts away
        done.set()

    thread = threading.Thread(target=answer_many)
    thread.start()
    while not done.is_set():
        backend.answered(window_sec=600).close()  # a process starting meanwhile
    thread.join()
    last = backend.answered(window_sec=600)
    missing = [n for n in range(300) if n % 10 and not last.contains(incoming(f"m{n}"))]
    assert missing == []
    assert not any(last.contains(incoming(f"m{n}")) for n in range(0, 300, 10))
