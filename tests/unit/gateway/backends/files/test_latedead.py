"""A message answered with an ack whose run then failed permanently goes to failed/ all the same
(gateway.backends.files.latedead): the run's copy with `source: run`, its answer forgotten, once, never while queued."""

from __future__ import annotations

import json
from pathlib import Path

from gateway.backends.files.answered import AnsweredIndex
from gateway.backends.files.latedead import FileLateDeadLetters
from gateway.home import Home
from gateway.payloads import letter_name
from gateway.spool import deadletters
from gateway.testing import make_incoming

REASON = "run r-1: step Finish: mine: `late-agent` was not found"


def _setup(tmp_path: Path) -> tuple[Home, AnsweredIndex, FileLateDeadLetters]:
    home = Home(tmp_path / "home")
    home.create()
    answered = AnsweredIndex(home.state / "answered.jsonl", window_sec=60, fsync=False)
    answered.open()
    return home, answered, FileLateDeadLetters(home, answered, fsync=False, max_payload_bytes=1 << 20)


def test_the_runs_copy_is_a_dead_letter_with_its_report_and_the_answer_is_forgotten(tmp_path: Path) -> None:
    home, answered, late = _setup(tmp_path)
    message = make_incoming("start late now", messageId="m1")
    answered.record(message)
    name = late.bury(message, REASON, [REASON])
    assert name == letter_name(message) and name.startswith("answered-console-m1-")
    assert not answered.contains(message)
    [letter] = deadletters.list_dead(home)
    assert (letter.name, letter.kind, letter.reason, letter.attempts, letter.conversation) == (
        name, "message", REASON, 1, "c1")
    report = json.loads((home.failed / f"{name}.error.json").read_text())
    assert report["errors"] == [REASON] and report["source"] == "run"
    assert json.loads((home.failed / name).read_bytes())["messageId"] == "m1"
    assert late.bury(message, REASON, [REASON]) == name  # again (a restart): the same letter, no second one
    assert len(deadletters.list_dead(home)) == 1
    assert deadletters.retry(home, [name]) == [name]
    assert (home.incoming / name).exists()
    answered.close()


def test_a_message_a_worker_still_holds_is_left_for_later(tmp_path: Path) -> None:
    home, answered, late = _setup(tmp_path)
    message = make_incoming("start late now", messageId="m2")
    held = home.processing / "w1"
    held.mkdir(parents=True)
    (held / "0001-console-m2.json").write_bytes(message.to_json())
    assert late.bury(message, REASON, [REASON]) is None
    assert deadletters.list_dead(home) == []
    answered.close()


def test_two_messages_whose_ids_make_the_same_file_name_are_both_dead_letters(tmp_path: Path) -> None:
    home, answered, late = _setup(tmp_path)
    first, second = make_incoming("first", messageId="chat:1"), make_incoming("second", messageId="chat/1")
    for message in (first, second):
        answered.record(message)
    names = {late.bury(message, REASON, [REASON]) for message in (first, second)}
    letters = deadletters.list_dead(home)
    assert len(names) == 2 and len(letters) == 2
    kept = {json.loads(letter.path.read_bytes())["message"] for letter in letters}
    assert kept == {"first", "second"}
    answered.close()
