"""Splitting replies to a platform's limit without breaking code fences or losing text."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gateway.channelkit.chunking import split_message


def _visible(text: str) -> str:
    return "".join(text.split())


def test_short_text_is_one_chunk() -> None:
    assert split_message("hello", 4096) == ["hello"]


def test_long_text_splits_at_line_ends_within_the_limit() -> None:
    text = "\n".join(f"line {i}" for i in range(1000))
    chunks = split_message(text, 2000)
    assert all(len(c) <= 2000 for c in chunks)
    assert all(c.splitlines()[-1].startswith("line ") for c in chunks)
    assert _visible("".join(chunks)) == _visible(text)


def test_a_code_block_cut_in_two_is_closed_and_reopened() -> None:
    code = "\n".join(f"x = {i}" for i in range(600))
    text = f"Here:\n```python\n{code}\n```\nDone."
    chunks = split_message(text, 2000)
    assert len(chunks) > 1
    for chunk in chunks:
        assert chunk.count("```") % 2 == 0, chunk[:50]
    assert chunks[1].startswith("```python\n")
    rebuilt = "".join(chunks).replace("``````python", "")
    assert _visible(rebuilt) == _visible(text)


def test_a_word_longer_than_the_limit_is_cut_hard() -> None:
    assert split_message("a" * 250, 100) == ["a" * 100, "a" * 100, "a" * 50]


def _rejoins(chunks: list[str], text: str) -> bool:
    """Whether removing, at some chunk boundaries, a closing fence line and the reopening line after it
    (a marker and a CommonMark-valid info string, as the splitter adds them) gives back `text`."""
    target = _visible(text)
    states: set[tuple[int, str]] = {(0, "")}  # (characters of target matched, marker closed at the cut)
    for chunk in chunks:
        reached: set[tuple[int, str]] = set()
        for position, marker in states:
            body = chunk
            if marker:
                first, _, body = chunk.partition("\n")
                info = first[len(marker):]
                if not first.startswith(marker) or (marker[0] == "`" and "`" in info):
                    continue
            head, _, last = body.rpartition("\n")
            for kept, closed in [(body, "")] + ([(head, last)] if re.fullmatch(r"`{3,}|~{3,}", last) else []):
                seen = _visible(kept)
                if target.startswith(seen, position):
                    reached.add((position + len(seen), closed))
        states = reached
    return (len(target), "") in states


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab `\n")), max_size=3000),
       st.sampled_from([40, 100, 2000]))
@example("`` ````````````\n`````````a```````````````", 40)  # backticks after a backtick fence are no info string
@example("```a\n" + "b " * 50, 40)  # a real info string is repeated on each reopened fence, and only there
def test_no_chunk_exceeds_the_limit_and_no_text_is_repeated_or_lost(text: str, limit: int) -> None:
    chunks = split_message(text, limit)
    assert all(len(c) <= limit for c in chunks)
    assert _rejoins(chunks, text), chunks


def test_backticks_with_more_backticks_after_them_open_no_fence() -> None:
    text = "`` ````````````\n`````````a```````````````"
    assert "".join(split_message(text, 40)).count("a") == 1


def test_limit_must_be_usable() -> None:
    with pytest.raises(ValueError):
        split_message("x", 5)


def test_a_shorter_fence_inside_a_longer_one_does_not_close_it() -> None:
    code = "\n".join(["````markdown", "```", *(f"line {i}" for i in range(20)), "```", "````"])
    chunks = split_message(code, 60)
    assert all(chunk.startswith("````") and chunk.endswith("````") for chunk in chunks), chunks
