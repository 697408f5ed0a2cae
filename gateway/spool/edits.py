"""Folding an edit into its waiting original on the file queue (gateway.stores.EditFolding).

The original is found in incoming/ by its name (the gateway names a payload `<stamp>-…-<channel>-<messageId>.json`)
and taken out of line by the same atomic rename into this worker's processing/ folder that a claim is: when the
rename succeeds no claim can have it, the edited bytes are written there and it is renamed back under its own
name, so it keeps its place; when the rename finds it gone it was claimed first, and the edit is not folded.
A crash while it is held returns it to incoming/ at the next start, as any claimed file (with either text).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from gateway.channelkit.edits import edited_bytes
from gateway.home import Home, NotRegularFile, atomic_write, read_file, safe_name

if TYPE_CHECKING:
    from gateway.models import IncomingPayload


class FileQueue(Protocol):
    """What folding needs of gateway.spool.queue.FileQueue (named here so the two modules need not import
    each other)."""

    home: Home
    worker_dir: Path
    fsync: bool
    max_payload_bytes: int

    def holds_worker_lock(self) -> bool: ...

    def notice(self, name: str) -> None: ...


def fold_edit(queue: FileQueue, edit: IncomingPayload) -> bool:
    """True when the waiting original of `edit` now holds its text (see the module's docstring)."""
    if not edit.editOf or not queue.holds_worker_lock():
        return False  # a handle that never opened has no processing/ folder of its own to hold it in
    for name in _candidates(queue, edit):
        source = queue.home.incoming / name
        held = queue.worker_dir / name
        try:
            os.rename(source, held)  # the claim's own atomic step: from here on nobody else can take it
        except FileNotFoundError:
            continue  # claimed (or folded) by another process a moment ago
        try:
            edited = _rewritten(queue, held, edit)
        finally:  # ForeignEdit too: the original goes back as it was
            os.rename(held, source)  # back in line under its own name: the same place
            queue.notice(name)  # re-indexed if this process's worker found it gone meanwhile
        if edited:
            return True
    return False


def _rewritten(queue: FileQueue, held: Path, edit: IncomingPayload) -> bool:
    """True when the held file was the original of `edit` and now holds its text, with its mtime (the place of a
    file another program named, when a queue opens on it); raises ForeignEdit."""
    try:
        edited = edited_bytes(read_file(held, queue.max_payload_bytes), edit)
        if edited is not None:
            was = os.lstat(held)
            atomic_write(held, edited, fsync=queue.fsync)
            with contextlib.suppress(OSError):  # folded all the same; only a restart could then place it later
                os.utime(held, ns=(was.st_atime_ns, was.st_mtime_ns), follow_symlinks=False)
    except (NotRegularFile, OSError):
        return False
    return edited is not None


def _candidates(queue: FileQueue, edit: IncomingPayload) -> list[str]:
    """Names in incoming/ that may hold the original (the channel's sink names it by channel and messageId)."""
    assert edit.editOf is not None
    endings = (f"-{safe_name(f'{edit.channel}-{edit.editOf}')}.json", f"-{safe_name(edit.editOf)}.json")
    try:
        return sorted(entry.name for entry in os.scandir(queue.home.incoming) if entry.name.endswith(endings))
    except FileNotFoundError:
        return []
