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


def test_retention_drops_the_old_end_and_leaves_a_marker_so_the_numbering_never_goes_back(tmp_path: Path) -> None:
    log = Transcript(tmp_path / "log", fsync=False)
    for text in ("old one", "old two"):
        log.append("ada:1", {"kind": "message", "text": text}, key=f"k-{text}")
    cutoff = log.entries("ada:1")[-1]["ts"] + 1
    for text in ("new one", "new two"):
        log.append("ada:1", {"kind": "message", "text": text, "ts": cutoff + 5})
    assert log.prune(cutoff) == 2
    again = Transcript(tmp_path / "log", fsync=False)
    assert [(e["seq"], e["kind"], e.get("text")) for e in again.entries("ada:1")] == [
        (2, "pruned", None), (3, "message", "new one"), (4, "message", "new two")]
    assert [e["seq"] for e in again.entries("ada:1", after=3)] == [4]  # a tab inside the window: as before
    assert again.by_key("ada:1", "k-old one") is None
    assert again.append("ada:1", {"kind": "message", "text": "next"})["seq"] == 5
    assert again.prune(cutoff) == 0  # nothing more to drop: the file is left alone


def test_a_conversation_wholly_past_retention_goes_but_the_newest_keeps_its_number(tmp_path: Path) -> None:
    log = Transcript(tmp_path / "log", fsync=False)
    for conversation in ("ada:1", "ada:2", "room"):
        log.append(conversation, {"kind": "message", "text": "long ago"})
    assert log.prune(log.entries("room")[-1]["ts"] + 1) == 3  # the last written
    assert log.conversations_of("ada") == ["ada:2"]
    assert [e["kind"] for e in log.entries("ada:2")] == [e["kind"] for e in log.entries("room")] == ["pruned"]
    assert log.new_conversation("ada") == "ada:3"  # not a second ada:2 a stale tab would mistake for the first


def test_only_the_most_recently_used_conversations_stay_in_memory(tmp_path: Path) -> None:
    log = Transcript(tmp_path / "log", fsync=False, cached=2)
    for number in (1, 2, 3):
        log.append(f"ada:{number}", {"kind": "message", "text": f"in {number}"})
    assert log.cached_conversations() == ["ada:2", "ada:3"]
    assert [e["text"] for e in log.entries("ada:1")] == ["in 1"]  # read from its file again
    assert log.cached_conversations() == ["ada:3", "ada:1"]
