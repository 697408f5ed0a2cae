"""Safe reads: a regular file read with plain system calls, never a link followed or a FIFO waited on, and
whether a path lies inside the folders it may be read from."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


class NotRegularFile(ValueError):
    """A path that is not a regular file (a FIFO, a directory, a symbolic link...): never read."""


_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "not a regular file: a FIFO"),
          (stat.S_ISDIR, "not a regular file: a directory"), (stat.S_ISSOCK, "not a regular file: a socket"),
          (stat.S_ISCHR, "not a regular file: a character device"),
          (stat.S_ISBLK, "not a regular file: a block device"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_file(path: str | os.PathLike[str], limit: int | None = None) -> bytes:
    """Reads a regular file with plain system calls (a buffered reader costs several more per file on
    the per-message path); with `limit`, at most `limit + 1` bytes, so an oversized file is detected
    without loading it.

    A symbolic link is not followed and a FIFO's open does not wait for a writer (O_NOFOLLOW,
    O_NONBLOCK); what was opened is checked with fstat, never by path, and anything but a regular
    file raises NotRegularFile naming its kind. The checks add no system call to a regular file's read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegularFile("a symbolic link") from exc
        if exc.errno == errno.ENXIO:  # a socket (or a device without a driver) cannot be opened
            raise NotRegularFile(_kind(os.lstat(path).st_mode)) from exc
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(_kind(info.st_mode))
        want = info.st_size + 1  # +1: notices a file that grew since the fstat
        chunks: list[bytes] = []
        total = 0
        while limit is None or total <= limit:
            if limit is not None:
                want = min(want, limit + 1 - total)
            chunk = os.read(fd, want)
            chunks.append(chunk)
            total += len(chunk)
            if len(chunk) < want:  # a regular file reads short only at its end
                break
            want = 65536
        return b"".join(chunks)
    finally:
        os.close(fd)



def is_within(path: Path, roots: list[Path]) -> bool:
    """Tells whether `path`, with symlinks and `..` resolved, lies inside one of `roots`."""
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return False
    return any(real.is_relative_to(root.resolve()) for root in roots)
