"""Duplicate suppression: the answered index's window expires, and it survives a restart."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from gateway.backends.files import answered as answered_module
from gateway.backends.files.answered import AnsweredIndex
from gateway.payloads import message_identity
from gateway.testing import make_incoming

WINDOW = 60.0


class Clock:
    """A settable stand-in for time.time in gateway.backends.files.answered."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock(1_000_000.0)
    monkeypatch.setattr(answered_module, "time", SimpleNamespace(time=fake))
    return fake


def _index(path: Path) -> AnsweredIndex:
    index = AnsweredIndex(path, window_sec=WINDOW, fsync=False)
    index.open()
    return index


def test_an_answered_message_is_a_duplicate_until_the_window_expires(tmp_path: Path, clock: Clock) -> None:
    index = _index(tmp_path / "answered.jsonl")
    message = make_incoming("hi", messageId="m1")
    assert not index.contains(message)
    index.record(message)
    clock.now += WINDOW - 1
    assert index.contains(message)
    clock.now += 2
    assert not index.contains(message), "the window never expires"
    index.close()


def test_only_the_same_channel_profile_and_message_id_is_a_duplicate(tmp_path: Path, clock: Clock) -> None:
    index = _index(tmp_path / "answered.jsonl")
    index.record(make_incoming("hi", channel="slack", channelProfileId="team", messageId="m1"))
    assert index.contains(make_incoming("other text", channel="slack", channelProfileId="team", messageId="m1"))
    assert not index.contains(make_incoming("hi", channel="slack", channelProfileId="other", messageId="m1"))
    assert not index.contains(make_incoming("hi", channel="telegram", channelProfileId="team", messageId="m1"))
    assert not index.contains(make_incoming("hi", channel="slack", channelProfileId="team", messageId="m2"))
    index.close()


def test_an_answer_is_remembered_after_a_restart(tmp_path: Path, clock: Clock) -> None:
    before = _index(tmp_path / "answered.jsonl")
    before.record(make_incoming("hi", messageId="m1"))
    before.close()
    clock.now += WINDOW - 1
    after = _index(tmp_path / "answered.jsonl")
    assert after.contains(make_incoming("hi", messageId="m1")), "forgotten after a restart"
    after.close()


def test_a_restart_after_the_window_forgets_and_compacts(tmp_path: Path, clock: Clock) -> None:
    path = tmp_path / "answered.jsonl"
    before = _index(path)
    before.record(make_incoming("old", messageId="old"))
    clock.now += WINDOW / 2
    before.record(make_incoming("new", messageId="new"))
    before.close()
    clock.now += WINDOW / 2 + 1
    after = _index(path)
    assert not after.contains(make_incoming("old", messageId="old"))
    assert after.contains(make_incoming("new", messageId="new"))
    kept = [json.loads(line)["k"] for line in path.read_text().splitlines()]
    assert kept == [message_identity(make_incoming("new", messageId="new"))]
    after.close()


def test_a_forgotten_answer_is_not_a_duplicate_and_stays_forgotten_after_a_restart(
    tmp_path: Path, clock: Clock
) -> None:
    path = tmp_path / "answered.jsonl"
    message = make_incoming("hello", messageId="acked-then-dead")
    index = _index(path)
    index.record(message)
    index.forget(message)  # its run failed permanently after the ack: a dead letter, to be retried
    assert not index.contains(message)
    index.close()
    reopened = _index(path)
    assert not reopened.contains(message)
    reopened.record(message)  # answered again after `dead retry`
    reopened.close()
    assert _index(path).contains(message)
