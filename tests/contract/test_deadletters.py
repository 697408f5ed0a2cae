"""Dead letters as `switchyard dead` uses them, on every backend: retry puts the original bytes back in
the queue with a fresh attempt count, drop deletes, an unknown name changes nothing."""

from __future__ import annotations

import json

import pytest

from tests.contract.backends import Backend
from tests.contract.test_runs import next_tick

DATA = json.dumps({"channel": "console", "message": "hello", "timestamp": 1, "messageId": "m1",
                   "senderId": "u1", "conversationId": "c1"}, indent=1).encode()


def test_a_dead_letter_keeps_the_original_bytes_and_says_why(backend: Backend) -> None:
    data = b'{"channel": "console",  "message": "caf\xc3\xa9 \\u2603",\n "odd": [1, 2.50]}  \n'
    name = backend.make_dead(data, "provider refused: not logged in", "c1")
    letter, stored = backend.dead_letters().show(name)
    assert stored == data
    assert letter.reason == "provider refused: not logged in" and letter.kind == "message"
    assert [found.name for found in backend.dead_letters().list_dead()] == [name]


def test_retry_puts_the_same_bytes_back_with_a_fresh_count(backend: Backend) -> None:
    name = backend.make_dead(DATA, "gave up after 3 attempts", "c1")
    store = backend.dead_letters()
    assert store.retry([name]) == [name]
    assert store.list_dead() == []
    assert backend.queued() == [(DATA, 0)]


def test_an_unknown_name_is_refused_and_nothing_moves(backend: Backend) -> None:
    name = backend.make_dead(DATA, "gave up", "c1")
    store = backend.dead_letters()
    with pytest.raises(KeyError):
        store.retry([name, "no-such-letter"])
    with pytest.raises(KeyError):
        store.drop(["no-such-letter", name])
    with pytest.raises(KeyError):
        store.show("no-such-letter")
    assert [letter.name for letter in store.list_dead()] == [name]
    assert backend.queued() == []


def test_dead_letters_are_listed_newest_first_each_with_its_reason(backend: Backend) -> None:
    older = backend.make_dead(DATA, "gave up after 3 attempts", "c1", hint="older")
    next_tick()
    newer = backend.make_dead(DATA.replace(b"m1", b"m2"), "provider refused", "c1", hint="newer")
    listed = backend.dead_letters().list_dead()
    assert [(letter.name, letter.reason) for letter in listed] == [
        (newer, "provider refused"), (older, "gave up after 3 attempts")]
    assert backend.dead_letters().show(older)[1] == DATA


def test_drop_deletes_for_good(backend: Backend) -> None:
    name = backend.make_dead(DATA, "gave up", "c1")
    store = backend.dead_letters()
    assert store.drop([name]) == [name]
    assert store.list_dead() == []
    assert store.retry_all() == []
    assert backend.queued() == []


def test_a_dead_reply_is_retried_into_the_outbox_and_says_where(backend: Backend) -> None:
    name = backend.make_dead_reply("your build is ready", "telegram refused: chat not found")
    store = backend.dead_letters()
    letter, _ = store.show(name)
    assert (letter.kind, letter.reason) == ("reply", "telegram refused: chat not found")
    assert backend.pending_replies() == []
    assert store.retry([name]) == [name]
    assert store.list_dead() == [] and backend.pending_replies() == ["your build is ready"]
    assert store.where("reply") != store.where("message"), "dead retry says where each kind went back to"
