"""The raw file-system floor: the same file operations per message as the queue, in a plain loop."""

from __future__ import annotations

import os
import time
from pathlib import Path

from gateway.home import fsync_dir


def _write(path: Path, data: bytes, fsync: bool) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)
    if fsync:
        fsync_dir(path.parent)


def floor_rate(root: Path, count: int, *, fsync: bool, payload: bytes, reply: bytes) -> float:
    """Messages per second of a loop that writes each message (tmp + rename), claims it (rename),
    reads it, writes a reply (tmp + rename), reads the reply, moves it to sent/ and unlinks the
    claimed file; fsyncing file and folder on each write when `fsync` is on, as the gateway does."""
    folders = {name: root / name for name in ("incoming", "processing", "outgoing", "sent")}
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    for index in range(count):
        name = f"{index:09d}.json"
        _write(folders["incoming"] / name, payload, fsync)
        claimed = folders["processing"] / name
        os.rename(folders["incoming"] / name, claimed)
        claimed.read_bytes()
        out = folders["outgoing"] / name
        _write(out, reply, fsync)
        out.read_bytes()
        os.rename(out, folders["sent"] / name)
        os.unlink(claimed)
    return count / (time.perf_counter() - started)
