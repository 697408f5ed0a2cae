"""Dedupe (spec 002): a message answered once is recognised as a repeat within the duplicate window, by
the process that answered it and the one that starts after it; not once the window passed, nor once
its answer was forgotten (a late dead letter, which `dead retry` must run again)."""

from __future__ import annotations

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
    index = backend.answered(window_sec=0.3)
    index.record(incoming("m1"))
    recorded = time.monotonic()
    assert index.contains(incoming("m1"))
    wait_until(lambda: not index.contains(incoming("m1")), timeout_s=5)
    assert time.monotonic() - recorded >= 0.25


def test_a_forgotten_answer_is_run_again_after_a_restart_too(backend: Backend) -> None:
    index = backend.answered(window_sec=600)
    index.record(incoming("m1"))
    index.record(incoming("m2"))
    index.forget(incoming("m1"))
    assert not index.contains(incoming("m1")) and index.contains(incoming("m2"))
    reopened = backend.answered(window_sec=600)
    assert not reopened.contains(incoming("m1")) and reopened.contains(incoming("m2"))
