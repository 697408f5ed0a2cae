"""Folder locks: a process's own folder (a worker's in processing/) held by an flock on its `.lock`, and the
lock of a dead process's folder taken to clean it up."""

from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path

FOLDER_LOCK_ATTEMPTS = 200
FOLDER_LOCK_PAUSE_S = 0.005  # while another process checks a folder it found unlocked (milliseconds)


def take_folder_lock(folder: Path) -> int:
    """Creates a process's own folder (a worker's in processing/) and takes its `.lock`; returns the
    lock's descriptor, held until closed. A process cleaning up after dead ones may hold that lock a
    moment, or remove the folder just made (it looked like a dead process's, see `lock_if_unheld`):
    then again, until the lock held is the one in the folder."""
    for attempt in range(FOLDER_LOCK_ATTEMPTS):
        folder.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if attempt == FOLDER_LOCK_ATTEMPTS - 1:
                raise
            time.sleep(FOLDER_LOCK_PAUSE_S)
            continue
        if _same_file(fd, folder / ".lock"):
            return fd
        os.close(fd)
    raise OSError(f"cannot take the lock of {folder}: it keeps being removed")


def lock_if_unheld(lock_path: Path) -> int | None:
    """Takes the `.lock` of another process's folder, to clean the folder up while holding it; None when
    the folder has no lock file (its process died before making one, or it is starting: it makes the
    folder again if removed, see `take_folder_lock`). Raises BlockingIOError when a live process holds
    the lock, or it was removed or replaced meanwhile (by whoever is cleaning the folder up)."""
    try:
        fd = os.open(lock_path, os.O_RDWR)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if not _same_file(fd, lock_path):
            raise BlockingIOError(errno.EAGAIN, "lock replaced", str(lock_path))
    except BlockingIOError:
        os.close(fd)
        raise
    return fd


def _same_file(fd: int, path: Path) -> bool:
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)
