"""A conversation's log: ordered, durable, one entry a delivered part even when the delivery is retried, and a
line cut short by a crash neither breaks it nor counts."""

from __future__ import annotations

from pathlib import Path

from plugins.web.transcript import Transcript, is_conversation, owner_of


def test_entries_come_back_in_order_after_a_restart_and_a_key_appends_once(tmp_path: Path) -> None:
    log = Transcript(tmp_path / "log", fsync=False)
    log.append("ada:1", {"kind": "message", "text": "one"}, key="part-0")
    log.append("ada:1", {"kind": "message", "text": "two"}, key="part-1")
    assert log.append("ada:1", {"kind": "message", "text": "one again"}, key="part-0")["text"] == "one"
    again = Transcript(tmp_path / "log", fsync=False)
    assert [(e["seq"], e["text"]) for e in again.entries("ada:1")] == [(1, "one"), (2, "two")]
    assert again.append("ada:1", {"kind": "message", "text": "two again"}, key="part-1")["seq"] == 2
    assert [e["text"] for e in again.entries("ada:1", after=1)] == ["two"]


def test_a_line_cut_short_by_a_crash_is_skipped_and_the_next_entry_follows_the_last_whole_one(
        tmp_path: Path) -> None:
    log = Transcript(tmp_path / "log", fsync=False)
    log.append("ada:1", {"kind": "message", "text": "whole"})
    with (tmp_path / "log" / "ada" / "1.jsonl").open("ab") as handle:
        handle.write(b'{"seq": 2, "kind": "mess')
    again = Transcript(tmp_path / "log", fsync=False)
    assert [e["text"] for e in again.entries("ada:1")] == ["whole"]
    assert again.append("ada:1", {"kind": "message", "text": "next"})["seq"] == 2


def test_an_edit_and_a_tap_fold_into_the_message_they_name(tmp_path: Path) -> None:
    log = Transcript(tmp_path / "log", fsync=False)
    log.append("room", {"kind": "message", "text": "draft", "buttons": [["a", "Allow"]]})
    log.append("room", {"kind": "edit", "target": 1, "text": "final"})
    log.append("room", {"kind": "answered", "target": 1, "label": "Allow"})
    shown = log.message("room", "1")
    assert shown is not None and (shown["text"], shown["answered"]) == ("final", "Allow")
    assert log.message("room", "2") is None


def test_only_the_ids_the_channel_makes_are_conversations() -> None:
    assert owner_of("ada:3") == "ada" and owner_of("room") is None
    assert [is_conversation(c) for c in ("ada:1", "room", "../x:1", "..:1", "ada:x", "ada", "a b:1")] == [
        True, True, False, False, False, False, False]
