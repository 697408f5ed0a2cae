"""Text that every store can hold: finding, and making safe, what one of them cannot.

PostgreSQL's text and jsonb refuse the NUL character, and no UTF-8 file or column can hold a lone
surrogate (half of a UTF-16 pair, which JSON can spell as `\\ud800`). The rule, the same on every
backend: an incoming payload holding such text anywhere (a value or a key, however deep) is invalid
input, dead-lettered at once with a reason naming where (gateway.payloads.parse_payload); what we
write ourselves (replies, apologies, run state) has such characters replaced by U+FFFD instead, so an
answer is never lost for one character.
"""

from __future__ import annotations

import json
import re
from typing import Any

REPLACEMENT = "\ufffd"
_UNSAFE = re.compile("[\x00\ud800-\udfff]")  # NUL, or a surrogate (a str never holds a proper pair)


def unstorable(value: Any, where: str = "") -> str | None:
    """Why `value` (parsed JSON) holds text no store can hold, naming the field; None when it holds none."""
    if isinstance(value, str):
        return _problem(value, where or "the payload")
    if isinstance(value, dict):
        for key, item in value.items():
            # named made safe: a NUL written `\u0000` would make the apology that quotes it unstorable
            named = json.dumps(made_safe(key), ensure_ascii=False)
            if isinstance(key, str) and (problem := _problem(key, f"a key ({named})")):
                return problem + (f" in {where}" if where else "")
            if problem := unstorable(item, f"{where}.{key}" if where else str(key)):
                return problem
    elif isinstance(value, list):
        for index, item in enumerate(value):
            if problem := unstorable(item, f"{where}[{index}]"):
                return problem
    return None


def storable(json_text: str) -> bool:
    """Whether JSON text (as `json.dumps(..., ensure_ascii=False)` writes it) holds no NUL and no lone
    surrogate; False may be wrong only for an escaped backslash followed by `u0000` (made safe for nothing)."""
    return "\\u0000" not in json_text and _UNSAFE.search(json_text) is None


def made_safe(value: Any) -> Any:
    """`value` (parsed JSON) with every NUL and lone surrogate, in values and keys, replaced by U+FFFD."""
    if isinstance(value, str):
        return _UNSAFE.sub(REPLACEMENT, value)
    if isinstance(value, dict):
        return {made_safe(key): made_safe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [made_safe(item) for item in value]
    return value


def safe_json(value: Any) -> bytes:
    """Compact UTF-8 JSON of `value` made safe: what any store holds."""
    return json.dumps(made_safe(value), ensure_ascii=False, separators=(",", ":")).encode()


def _problem(text: str, where: str) -> str | None:
    found = _UNSAFE.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return f"{where} contains a NUL character"
    return f"{where} contains a lone surrogate ({json.dumps(found.group())[1:-1]}), which is not valid Unicode"
