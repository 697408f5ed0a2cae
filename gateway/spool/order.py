"""The claim order of queued files: where a file's name (or mtime, or first sight) puts it, and the names
the gateway writes."""

from __future__ import annotations

import itertools
import os
import re
import time

_GATEWAY_NAME = re.compile(r"(\d{20})-\d+-\d{6}-")


def order_of(name: str, mtime_ns: int | None = None) -> int | None:
    """A file's place in the claim order: the stamp of a name the gateway wrote, else `mtime_ns`.

    Files the gateway writes are named `<stamp:020d>-<pid>-<counter:06d>-<hint>.json` by NameSequence,
    whose stamps never go backwards, so their order is the order they were taken in even if the
    clock steps back. A file another program drops gets a NameSequence stamp when the running queue
    first sees it arrive; only the backlog found at start (and files returned from a dead worker)
    are placed by their mtime (ties broken by name).
    """
    match = _GATEWAY_NAME.match(name)
    return int(match.group(1)) if match else mtime_ns


class NameSequence:
    """Sortable, unique names for files the gateway writes: a stamp that never goes backwards, pid, counter.

    The stamp is the clock in ns, or one more than the last stamp issued or seen in incoming/ when
    the clock is behind it (stepped back): `see()` is fed the order of every file indexed by its name
    or mtime, which covers the files already queued at start (a restart after a clock step) and those
    of other processes sharing the home. `stamp()` alone places a file other programs drop, by first
    sight. The pid and counter keep names unique across processes and within a ns.
    """

    def __init__(self) -> None:
        self._counter = itertools.count()
        self._last = 0

    def see(self, stamp: int) -> None:
        """Raises the floor to a stamp found in incoming/."""
        if stamp > self._last:
            self._last = stamp

    def stamp(self) -> int:
        """The next stamp: the clock in ns, or one more than the last stamp issued or seen."""
        stamp = max(time.time_ns(), self._last + 1)
        self._last = stamp
        return stamp

    def place(self, name: str, mtime_ns: int | None) -> int:
        """A new file's place in the claim order: its gateway name's stamp, else `mtime_ns` (the backlog),
        else a stamp taken now (first sight). A place taken from a name or an mtime raises the floor,
        so what arrives later goes after it."""
        order = order_of(name, mtime_ns)
        if order is None:
            return self.stamp()
        self.see(order)
        return order

    def prefix(self) -> str:
        return f"{self.stamp():020d}-{os.getpid()}-{next(self._counter):06d}"
