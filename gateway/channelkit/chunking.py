"""Splits a reply into messages that fit a platform's length limit, without breaking code fences."""

from __future__ import annotations

import re

_FENCE = re.compile(r"^\s*(```+|~~~+)(.*)$")


def split_message(text: str, limit: int) -> list[str]:
    """Splits `text` into chunks of at most `limit` characters.

    Prefers to cut at a blank line, then a line end, then a space. A cut inside a fenced code
    block closes the fence at the end of the chunk and reopens it (same info string) in the next,
    so every chunk renders as valid Markdown on its own.
    """
    if limit < 16:
        raise ValueError("limit must be at least 16 characters")
    if len(text) <= limit:
        return [text] if text else []
    chunks: list[str] = []
    rest, reopen = text, ""
    while rest:
        room = limit - len(reopen)
        if len(rest) <= room:
            chunks.append(reopen + rest)
            break
        cut = _cut_point(rest, room)
        fence = _open_fence(reopen + rest[:cut])
        if fence:  # leave room for the closing fence
            cut = _cut_point(rest, room - len(fence[0]) - 1)
            fence = _open_fence(reopen + rest[:cut])
        piece, rest = rest[:cut], rest[cut:]
        if fence:
            chunks.append(f"{reopen}{piece.rstrip(chr(10))}\n{fence[0]}")
            reopen = f"{fence[0]}{fence[1]}\n"
        else:
            chunks.append(reopen + piece.rstrip())
            rest, reopen = rest.lstrip("\n"), ""
    return [chunk for chunk in chunks if chunk.strip()]


def _open_fence(text: str) -> tuple[str, str] | None:
    """The fence (marker, info string) still open at the end of `text`, if any."""
    open_fence: tuple[str, str] | None = None
    for line in text.splitlines():
        match = _FENCE.match(line)
        if not match:
            continue
        marker, info = match.group(1), match.group(2).strip()
        if marker[0] == "`" and "`" in info:  # CommonMark: no backtick fence has backticks after its info
            continue
        if open_fence is None:
            open_fence = (marker, info)
        elif marker[0] == open_fence[0][0] and len(marker) >= len(open_fence[0]) and not info:
            open_fence = None
    return open_fence


def _cut_point(text: str, limit: int) -> int:
    """Where to cut `text` so the first part is at most `limit` characters."""
    limit = max(1, limit)
    window = text[:limit]
    for separator in ("\n\n", "\n", " "):
        index = window.rfind(separator)
        if index > limit // 2:
            return index + len(separator)
    return limit
