"""Counts the file-system calls a run makes (a measure the disk's drift cannot move)."""

from __future__ import annotations

import builtins
import io
import os
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR


def _counting(counter: Counter[str], name: str, real: Callable[..., Any],
              kind: Callable[..., str] | None = None) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        counter[kind(*args, **kwargs) if kind else name] += 1
        return real(*args, **kwargs)
    return wrapper


def _open_kind(path: Any, flags: int, *args: Any, **kwargs: Any) -> str:
    if flags & os.O_CREAT:
        return "create"
    return "open-write" if flags & _WRITE_FLAGS else "open-read"


def _io_open_kind(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> str:
    return "create" if any(m in mode for m in "wax") else "open-read"


@contextmanager
def count_file_calls() -> Iterator[Counter[str]]:
    """Patches the `os` and `io` calls the gateway uses; yields the running counts."""
    counter: Counter[str] = Counter()
    patches: dict[tuple[Any, str], Any] = {
        (os, "open"): _counting(counter, "open", os.open, _open_kind),
        (io, "open"): _counting(counter, "open", io.open, _io_open_kind),
        (builtins, "open"): _counting(counter, "open", builtins.open, _io_open_kind),
        (os, "rename"): _counting(counter, "rename", os.rename),
        (os, "replace"): _counting(counter, "rename", os.replace),
        (os, "unlink"): _counting(counter, "unlink", os.unlink),
        (os, "fsync"): _counting(counter, "fsync", os.fsync),
        (os, "fdatasync"): _counting(counter, "fsync", os.fdatasync),
        (os, "stat"): _counting(counter, "stat", os.stat),
        (os, "mkdir"): _counting(counter, "mkdir", os.mkdir),
        (os, "write"): _counting(counter, "write", os.write),
    }
    originals = {target: getattr(*target) for target in patches}
    for (module, name), replacement in patches.items():
        setattr(module, name, replacement)
    try:
        yield counter
    finally:
        for (module, name), original in originals.items():
            setattr(module, name, original)
