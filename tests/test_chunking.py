"""Splitting replies to a platform's limit without breaking code fences or losing text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.chunking import split_message


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


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab `\n")), max_size=3000),
       st.sampled_from([40, 100, 2000]))
def test_no_chunk_exceeds_the_limit_and_no_text_is_lost(text: str, limit: int) -> None:
    chunks = split_message(text, limit)
    assert all(len(c) <= limit for c in chunks)
    rebuilt = "".join(chunks)
    for char in "ab":
        assert rebuilt.count(char) == text.count(char)


def test_limit_must_be_usable() -> None:
    with pytest.raises(ValueError):
        split_message("x", 5)
