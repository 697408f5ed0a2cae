"""File names made from ids: one component, no separators, no dots at the start (a lock file's, a spool file's)."""

from __future__ import annotations

import re

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_MAX_NAME_PART = 80


def safe_name(part: str) -> str:
    """Makes an id usable as one file-name component: no separators, no dots at the start."""
    cleaned = _UNSAFE.sub("_", part).lstrip(".")[:_MAX_NAME_PART]
    return cleaned or "_"
