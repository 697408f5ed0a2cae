"""The progress-note helpers: the bounded memory of note messages, clipping, edit-or-post."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway import DeliveryRecord, NoteMessages, OutgoingPayload, clip_note, deliver_note
from gateway.testing.conformance import reply


def test_the_memory_is_bounded_and_forgets_the_least_recently_used() -> None:
    notes = NoteMessages(limit=2)
    notes.remember("c1", "k", "m1")
    notes.remember("c2", "k", "m2")
    assert notes.get("c1", "k") == "m1"  # c1 is now the most recently used
    notes.remember("c3", "k", "m3")
    assert (notes.get("c1", "k"), notes.get("c2", "k"), notes.get("c3", "k")) == ("m1", None, "m3")


def test_kept_note_messages_outlive_a_restart_and_a_forgotten_one_stays_forgotten(tmp_path: Path) -> None:
    path = tmp_path / "notes" / "tg.json"
    notes = NoteMessages(path=path)
    notes.remember("c1", "answer:m1", "1001:7")
    notes.remember("c1", "answer:m2", "1001:8")
    notes.forget("c1", "answer:m2")
    again = NoteMessages(path=path)
    assert (again.get("c1", "answer:m1"), again.get("c1", "answer:m2")) == ("1001:7", None)


def test_closing_a_conversations_streams_forgets_its_previews_only_and_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "tg.json"
    notes = NoteMessages(path=path)
    notes.remember("c1", "run-1/build", "m1")  # a progress note: stays
    notes.remember("c1", "answer:7", "m2", stream=True)
    notes.remember("c2", "answer:8", "m3", stream=True)  # another conversation: stays
    again = NoteMessages(path=path)
    again.close_streams("c1")
    assert (again.get("c1", "run-1/build"), again.get("c1", "answer:7"), again.get("c2", "answer:8")) == (
        "m1", None, "m3")


def test_an_unreadable_file_of_note_messages_starts_empty(tmp_path: Path) -> None:
    path = tmp_path / "tg.json"
    path.write_text("{not json")
    notes = NoteMessages(path=path)
    assert notes.get("c1", "k") is None
    notes.remember("c1", "k", "m1")  # and is written anew
    assert NoteMessages(path=path).get("c1", "k") == "m1"


@pytest.mark.parametrize(("text", "limit", "clipped"), [
    ("  fits  ", 4, "fits"),
    ("one two three", 8, "one two…"),
    ("abcdef", 3, "ab…"),
])
def test_a_note_is_clipped_to_the_limit(text: str, limit: int, clipped: str) -> None:
    assert clip_note(text, limit) == clipped


def test_clipping_counts_as_the_platform_does() -> None:
    def utf16(text: str) -> int:
        return len(text.encode("utf-16-le")) // 2

    clipped = clip_note("\U0001F600" * 10, 9, utf16)
    assert clipped == "\U0001F600" * 4 + "…"


async def test_a_note_is_posted_once_then_edited_and_posted_again_when_gone() -> None:
    notes, calls, gone = NoteMessages(), [], set()

    async def post(text: str) -> str:
        calls.append(("post", text))
        return f"m{len(calls)}"

    async def edit(message_id: str, text: str) -> bool:
        calls.append(("edit", message_id, text))
        return message_id not in gone

    def payload(text: str) -> OutgoingPayload:
        return reply(text, "c1", progressKey="r/s")

    records: list[DeliveryRecord] = []
    for text in ("a", "b"):
        records.append(await deliver_note(payload(text), notes, text, post, edit))
    gone.add("m1")
    records.append(await deliver_note(payload("c"), notes, "c", post, edit))
    assert calls == [("post", "a"), ("edit", "m1", "b"), ("edit", "m1", "c"), ("post", "c")]
    assert [r.platform_ids for r in records] == [["m1"], ["m1"], ["m4"]]
    assert notes.get("c1", "r/s") == "m4"
