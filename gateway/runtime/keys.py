"""The key scheduler: one message at a time per ordering key (gateway.payloads.ordering_keys), claim order within
a key."""

from __future__ import annotations

import heapq
import itertools
import logging
from bisect import bisect_left, insort
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

log = logging.getLogger("switchyard.keys")

T = TypeVar("T")
Order = tuple[int, str]


class KeyLocks(Protocol):
    """What the scheduler uses of gateway.stores.Locks (any Locks is one): the two calls it makes."""

    def acquire(self, resource: str) -> bool: ...
    def release(self, resource: str) -> None: ...


@dataclass(eq=False)
class _Pending(Generic[T]):
    order: Order
    keys: tuple[str, ...]
    item: T | None
    held: bool = False  # a placeholder for a message waiting out a retry backoff


class KeyScheduler(Generic[T]):
    """Decides which claimed messages may start now.

    A message starts only when none of its keys is busy and no earlier pending message shares
    one of its keys; so messages sharing a key start in claim order, while messages of
    independent keys start at once, up to `max_concurrency` running.

    Each key keeps its pending messages in claim order; only a message at the head of all its
    keys is a candidate, so adding, starting and finishing cost O(log n) however long a backlog
    is. A cross-process lock (`locks`) is taken when a key starts and kept while more messages of
    that key wait here, so a busy conversation costs two lock-file operations per burst, not per
    message. A lock the storage cannot take or release now (`lock_errors`: a full disk, a database
    connection ended) leaves its key busy until a later `ready()`, never a message unstarted for good.
    """

    def __init__(self, max_concurrency: int, locks: KeyLocks | None = None, *,
                 lock_errors: tuple[type[BaseException], ...] = (OSError,)):
        self.max_concurrency = max_concurrency
        self.locks = locks
        self.lock_errors = lock_errors
        self.running = 0
        self.contended = False  # a key was held by another process at the last `ready()`
        self._queues: dict[str, list[_Pending[T]]] = {}
        self._entries: dict[Order, _Pending[T]] = {}
        self._candidates: list[tuple[Order, int, _Pending[T]]] = []
        self._queued: set[int] = set()
        self._ticket = itertools.count()
        self._busy: set[str] = set()
        self._locked: set[str] = set()
        self._lock_errors: set[str] = set()
        self._waiting = 0

    # --- pending messages -------------------------------------------------------------------

    def add(self, order: Order, keys: tuple[str, ...], item: T) -> None:
        """Adds a claimed message; a placeholder held for the same order is replaced in place."""
        held = self._entries.get(order)
        if held is not None and held.held:
            self._drop(held)
        pending = _Pending(order, keys, item)
        self._insert(pending)
        self._waiting += 1

    def hold(self, order: Order, keys: tuple[str, ...]) -> None:
        """Keeps a requeued message's place, so later messages of its keys wait for its retry."""
        self._insert(_Pending(order, keys, None, held=True))

    def release_hold(self, order: Order) -> None:
        """Drops a placeholder whose message will not come back (e.g. claimed elsewhere)."""
        held = self._entries.get(order)
        if held is not None and held.held:
            self._drop(held)
            for key in held.keys:
                self._release_if_idle(key)

    def _insert(self, pending: _Pending[T]) -> None:
        self._entries[pending.order] = pending
        for key in pending.keys:
            insort(self._queues.setdefault(key, []), pending, key=lambda p: p.order)
        self._offer(pending)

    def _drop(self, pending: _Pending[T]) -> None:
        """Removes an entry from every key queue and offers the new heads."""
        del self._entries[pending.order]
        for key in pending.keys:
            queue = self._queues[key]
            queue.remove(pending)
            if queue:
                self._offer(queue[0])
            else:
                del self._queues[key]

    def _offer(self, pending: _Pending[T]) -> None:
        if id(pending) not in self._queued and self._startable_in_order(pending):
            self._queued.add(id(pending))
            heapq.heappush(self._candidates, (pending.order, next(self._ticket), pending))

    def _startable_in_order(self, pending: _Pending[T]) -> bool:
        """Still pending, not a placeholder, and first in line for every one of its keys."""
        return (not pending.held and self._entries.get(pending.order) is pending
                and all(self._queues[key][0] is pending for key in pending.keys))

    # --- starting and finishing -------------------------------------------------------------

    def ready(self) -> Iterator[tuple[tuple[str, ...], T]]:
        """Yields the messages that may start now and marks their keys busy."""
        self.contended = False
        blocked: list[_Pending[T]] = []
        try:
            while self._candidates and self.running < self.max_concurrency:
                pending = heapq.heappop(self._candidates)[2]
                self._queued.discard(id(pending))
                if not self._startable_in_order(pending):
                    continue
                blocked.append(pending)  # offered again below unless it starts, whatever `_lock` raises
                if self._busy.intersection(pending.keys) or not self._lock(pending.keys):
                    continue
                blocked.pop()
                self._drop(pending)
                self._waiting -= 1
                self._busy.update(pending.keys)
                self.running += 1
                assert pending.item is not None
                yield pending.keys, pending.item
        finally:
            for pending in blocked:
                self._offer(pending)

    def reserve(self, keys: tuple[str, ...]) -> bool:
        """Takes the cross-process locks of `keys` before a message of them is claimed (all or none).

        A key taken here and not used by a claimed message is dropped by `release_idle()`.
        """
        return self._lock(keys)

    def _lock(self, keys: tuple[str, ...]) -> bool:
        """Takes the cross-process locks of `keys` not already held (all or none).

        Keys are taken in sorted order by every process, so two processes wanting the same two
        keys never hold one each while waiting for the other.
        """
        if self.locks is None:
            return True
        taken: list[str] = []
        for key in sorted(keys):
            if key in self._locked:
                continue
            try:
                acquired = self.locks.acquire(key)
            except self.lock_errors as exc:  # e.g. a full disk: treat the key as busy and look again shortly
                if key not in self._lock_errors:
                    log.error("cannot take the lock of %s (retrying): %s", key, exc)
                self._lock_errors.add(key)
                acquired = False
            else:
                self._lock_errors.discard(key)
            if not acquired:
                for done in taken:
                    self._unlock(done)
                self.contended = True
                return False
            taken.append(key)
            self._locked.add(key)
        return True

    def lost_locks(self, keys: set[str]) -> None:
        """Forgets locks that expired while they could not be renewed (another process may hold them now): each
        is taken again before the next message of its key is claimed or starts here."""
        self._locked.difference_update(keys)

    def _unlock(self, key: str) -> None:
        self._locked.discard(key)
        if self.locks is not None:
            try:
                self.locks.release(key)
            except self.lock_errors as exc:  # left behind, it expires after its TTL (or with this process)
                log.error("cannot release the lock of %s: %s", key, exc)

    def finish(self, keys: tuple[str, ...]) -> None:
        """Frees the keys of a message that finished (succeeded, failed or was requeued)."""
        self._busy.difference_update(keys)
        self.running -= 1
        for key in keys:
            self._release_if_idle(key)
            queue = self._queues.get(key)
            if queue:
                self._offer(queue[0])

    def _release_if_idle(self, key: str) -> None:
        """Drops the cross-process lock of a key with nothing running or waiting here."""
        if key in self._locked and key not in self._busy and key not in self._queues:
            self._unlock(key)

    def lock_running(self, locks: KeyLocks) -> bool:
        """Starts using cross-process locks: takes those of every key running or with messages claimed
        here (all or none), so another process can take none of them while this one still has a
        message of it, and a key's messages stay in order across processes."""
        keys = sorted((self._busy | self._queues.keys()) - self._locked)
        self.locks = locks
        if self._lock(tuple(keys)):
            return True
        self.locks = None
        return False

    # --- views and shutdown -----------------------------------------------------------------

    def locked_keys(self) -> list[str]:
        """Keys whose cross-process lock this scheduler holds (running or with messages waiting)."""
        return sorted(self._locked)

    def pending_items(self) -> list[T]:
        """The claimed messages that have not started, in claim order (left in place)."""
        return [p.item for _, p in sorted(self._entries.items()) if p.item is not None]

    def drain_pending(self) -> list[T]:
        """Removes and returns every claimed message that has not started (for shutdown); their keys'
        locks are kept until `release_idle()`, called once the messages are back in incoming/, so no
        other process takes a key and claims a later message of it first."""
        items = [p.item for _, p in sorted(self._entries.items()) if p.item is not None]
        self._entries.clear()
        self._queues.clear()
        self._candidates.clear()
        self._queued.clear()
        self._waiting = 0
        return items

    def release_idle(self) -> None:
        """Drops the cross-process locks of every key with nothing running or waiting here."""
        for key in list(self._locked):
            self._release_if_idle(key)

    def ahead_of(self, order: Order) -> int:
        """How many messages sharing a key run or wait before a pending one (0 when it is not pending)."""
        pending = self._entries.get(order)
        if pending is None or pending.held:
            return 0
        # each key's queue is sorted by order (insort), so its position is a bisection, not a scan
        return max(bisect_left(self._queues[key], order, key=lambda p: p.order) + (key in self._busy)
                   for key in pending.keys)

    @property
    def pending_count(self) -> int:
        return self._waiting
