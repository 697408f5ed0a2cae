"""Sweeping a folder: the files in it by age, and the old ones removed (a dead writer's `.tmp` files among them);
a file another process takes or removes meanwhile is skipped."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

STALE_TMP_S = 60.0  # a `.tmp` file this old was left by a writer that died mid-write


def scan_mtimes(folder: Path, keep: Callable[[str], bool]) -> Iterator[tuple[str, int]]:
    """(name, mtime in ns) of each entry of `folder` whose name `keep` accepts, leaving out the ones
    that vanished between the listing and their stat (taken by another process sharing the home);
    a symbolic link's own mtime, not its target's."""
    for entry in os.scandir(folder):
        if keep(entry.name):
            try:
                yield entry.name, entry.stat(follow_symlinks=False).st_mtime_ns
            except FileNotFoundError:
                continue


def remove_old_files(folder: Path, match: Callable[[str], bool], older_than_s: float) -> list[str]:
    """Deletes the files of `folder` whose name `match` accepts, last changed more than
    `older_than_s` ago; a missing folder, or a file removed meanwhile (another process pruning the
    same home), is skipped. Returns the names removed."""
    cutoff_ns = time.time_ns() - int(older_than_s * 1e9)
    removed = []
    with contextlib.suppress(FileNotFoundError):
        for name, mtime_ns in list(scan_mtimes(folder, match)):
            if mtime_ns < cutoff_ns:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(folder / name)
                    removed.append(name)
    return removed


def remove_stale_tmp(folder: Path) -> list[str]:
    """Deletes the `.tmp` files a writer killed in the middle of an `atomic_write` left in `folder`
    (older than STALE_TMP_S: a live writer renames its file within milliseconds)."""
    return remove_old_files(folder, lambda name: name.endswith(".tmp"), STALE_TMP_S)
