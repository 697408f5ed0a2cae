"""The dead-letter store: listing, showing, retrying (bytes back, fresh attempts) and dropping dead letters."""

from __future__ import annotations

import json
import os
import time

import pytest

from gateway.home import Home
from gateway.spool import deadletters
from gateway.spool.deadletters import move_to_failed
from gateway.spool.queue import FileQueue
from gateway.testing import drop_incoming

ORIGINAL = b'{"channel": "console", "message": "x", "timestamp": 1, "messageId": "m", "conversationId": "c1"}'


def _dead_message(home: Home, name: str = "m.json", data: bytes = ORIGINAL) -> FileQueue:
    """Fails a message twice through the real queue, then dead-letters it."""
    drop_incoming(home, data, name)
    queue = FileQueue(home, fsync=False)
    queue.open()
    claimed = queue.claim()
    assert claimed is not None
    queue.requeue(claimed, "boom", delay_s=0)
    queue.rescan()
    claimed = queue.claim()
    assert claimed is not None and claimed.attempts == 1
    queue.dead_letter(claimed, "failed 2 time(s); last error: boom", attempts=2)
    queue.close()
    return queue


def _dead_reply(home: Home, name: str = "r.json") -> None:
    path = home.outgoing / name
    path.write_bytes(b'{"channel": "console", "message": "hi", "conversationId": "c2"}')
    move_to_failed(home, path, fsync=False, reason="delivery failed 5 time(s): down", attempts=5, source="outgoing")


def test_list_shows_a_dead_message_with_its_reason_attempts_and_conversation(home: Home) -> None:
    _dead_message(home)
    [letter] = deadletters.list_dead(home)
    assert (letter.name, letter.kind, letter.attempts, letter.conversation) == ("m.json", "message", 2, "c1")
    assert "boom" in letter.reason and letter.failed_at
    letter_again, data = deadletters.show(home, "m.json")
    assert data == ORIGINAL and letter_again == letter


def test_retry_puts_the_original_bytes_back_in_incoming_with_a_fresh_attempt_count(home: Home) -> None:
    _dead_message(home)
    # an attempt record left for the name (e.g. by a worker killed before it cleaned up) is not inherited
    (home.state / "attempts" / "m.json.json").write_text(json.dumps({"attempts": 4, "errors": ["old"]}))
    assert deadletters.retry(home, ["m.json"]) == ["m.json"]
    assert (home.incoming / "m.json").read_bytes() == ORIGINAL
    assert os.listdir(home.failed) == []
    assert deadletters.list_dead(home) == []
    queue = FileQueue(home, fsync=False)
    queue.open()
    claimed = queue.claim()
    assert claimed is not None and (claimed.name, claimed.attempts, claimed.errors) == ("m.json", 0, [])


def test_retry_puts_an_undeliverable_reply_back_in_outgoing(home: Home) -> None:
    _dead_reply(home)
    [letter] = deadletters.list_dead(home)
    assert (letter.kind, letter.attempts, letter.conversation) == ("reply", 5, "c2")
    assert deadletters.retry_all(home) == ["r.json"]
    assert json.loads((home.outgoing / "r.json").read_bytes())["message"] == "hi"
    assert os.listdir(home.failed) == []


def test_a_letter_renamed_in_failed_returns_under_its_original_name(home: Home) -> None:
    _dead_message(home)
    _dead_message(home)  # the same name again: kept as <ns>-m.json in failed/
    names = [letter.name for letter in deadletters.list_dead(home)]
    assert len(names) == 2 and names[1] == "m.json" and names[0].endswith("-m.json")  # newest first
    assert deadletters.retry(home, [names[0]]) == [names[0]]
    assert (home.incoming / "m.json").read_bytes() == ORIGINAL
    # the original name is taken now: the second keeps its stamp-free name with a suffix, nothing is overwritten
    assert deadletters.retry(home, ["m.json"]) == ["m.json"]
    assert sorted(os.listdir(home.incoming))[0] == "m.json" and len(os.listdir(home.incoming)) == 2
    assert all(p.read_bytes() == ORIGINAL for p in home.incoming.iterdir())


def test_unknown_names_are_refused_and_nothing_moves(home: Home) -> None:
    _dead_message(home)
    with pytest.raises(KeyError, match="nope.json, ../settings.yaml"):
        deadletters.retry(home, ["m.json", "nope.json", "../settings.yaml"])
    with pytest.raises(KeyError):
        deadletters.drop(home, ["m.json.error.json"])
    with pytest.raises(KeyError):
        deadletters.show(home, "nope.json")
    assert [letter.name for letter in deadletters.list_dead(home)] == ["m.json"]
    assert not (home.incoming / "m.json").exists()


def test_drop_deletes_the_letter_and_its_report(home: Home) -> None:
    _dead_message(home)
    _dead_reply(home)
    assert deadletters.drop(home, ["m.json"]) == ["m.json"]
    assert sorted(os.listdir(home.failed)) == ["r.json", "r.json.error.json"]


def test_a_report_without_its_message_is_not_a_dead_letter_and_is_cleaned_once_old(home: Home) -> None:
    _dead_message(home)
    os.rename(home.failed / "m.json", home.incoming / "m.json")  # moved back by hand (or a retry cut short)
    assert deadletters.list_dead(home) == []
    report = home.failed / "m.json.error.json"
    assert report.exists()  # young: it may be a dead letter being written
    old = time.time() - deadletters.STALE_REPORT_S - 5
    os.utime(report, (old, old))
    assert deadletters.list_dead(home) == []
    assert not report.exists()


def test_an_invalid_payload_is_listed_and_shown(home: Home) -> None:
    (home.failed / "junk.json").write_bytes(b"not json")
    [letter] = deadletters.list_dead(home)
    assert (letter.name, letter.conversation) == ("junk.json", None)
    assert "no error report" in letter.reason
    assert deadletters.show(home, "junk.json")[1] == b"not json"


def test_a_conversation_no_store_can_hold_is_listed_printable(home: Home) -> None:
    """Its NUL and lone surrogate are shown as U+FFFD (a lone surrogate made `dead list` crash printing it);
    the bytes stay as they came."""
    data = json.dumps({"channel": "console", "message": "x", "timestamp": 1, "messageId": "m",
                       "conversationId": "c\x00\ud800"}).encode()
    (home.failed / "bad.json").write_bytes(data)
    [letter] = deadletters.list_dead(home)
    assert letter.conversation == "c\ufffd\ufffd" and letter.conversation.encode()
    assert deadletters.show(home, "bad.json")[1] == data


def test_a_quarantined_directory_or_link_is_listed_never_read_and_can_be_dropped(home: Home, tmp_path) -> None:
    (home.failed / "folder.json").mkdir()
    (home.failed / "folder.json" / "inside").write_text("x")
    secret = tmp_path / "secret"
    secret.write_text("do not read")
    (home.failed / "link.json").symlink_to(secret)
    assert sorted(letter.name for letter in deadletters.list_dead(home)) == ["folder.json", "link.json"]
    assert deadletters.show(home, "link.json")[1] == b""
    assert deadletters.drop(home, ["folder.json", "link.json"]) == ["folder.json", "link.json"]
    assert os.listdir(home.failed) == [] and secret.read_text() == "do not read"
