"""What an unknown settings key probably meant: the closest key its model declares at that place."""

from __future__ import annotations

import difflib
import types
from collections.abc import Collection, Sequence
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel


def keys_at(model: type[BaseModel], path: Sequence[str | int]) -> list[str]:
    """The keys `model` declares at `path` (e.g. ("queue",) → QueueSettings' fields; ("channels", 0) →
    a profile's); empty when the path leads to no model."""
    kind: Any = model
    for part in path:
        kind = _unwrap_optional(kind)
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            field = kind.model_fields.get(part) if isinstance(part, str) else None
            if field is None:
                return []
            kind = field.annotation
        elif get_origin(kind) in (list, dict) and get_args(kind):
            kind = get_args(kind)[-1]  # a list index or a mapping key (providers.<name>) steps into the values
        else:
            return []
    kind = _unwrap_optional(kind)
    return list(kind.model_fields) if isinstance(kind, type) and issubclass(kind, BaseModel) else []


def _unwrap_optional(kind: Any) -> Any:
    if get_origin(kind) in (Union, types.UnionType):
        options = [arg for arg in get_args(kind) if arg is not type(None)]
        return options[0] if len(options) == 1 else kind
    return kind


def home_of(model: type[BaseModel], path: Sequence[str | int], key: str) -> str | None:
    """The field directly under `path` whose model declares `key` (`allow_from` at the top level → `channels`,
    whose entries declare it): where a key written at the wrong level belongs."""
    for name in keys_at(model, path):
        if key in keys_at(model, [*path, name, 0]) or key in keys_at(model, [*path, name]):
            return name
    return None


def unknown_key(key: str, known: Collection[str], *, belongs: str | None = None) -> str:
    """The reason for a key its model does not declare: `unknown key; did you mean `allow_from`?`, where it
    belongs when a nested model declares it, or the keys it may be when none is close."""
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=CLOSE_ENOUGH)
    if close:
        return f"unknown key; did you mean `{close[0]}`?"
    if belongs:
        return f"unknown key here; it belongs under `{belongs}`"
    return f"unknown key (known here: {', '.join(sorted(known))})" if known else "unknown key"


CLOSE_ENOUGH = 0.7  # difflib's ratio: a typo scores 0.9 and more; `allow_from` to `log_format` scores 0.6
