"""Ordering keys and the key scheduler: one message at a time per key, claim order within a key."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from gateway.locks import LockDirectory
from gateway.models import IncomingPayload

T = TypeVar("T")


def ordering_keys(message: IncomingPayload) -> tuple[str, ...]:
    """The keys a message holds while it is processed: its run (if any) and its conversation."""
    conversation = f"conv:{message.channel}/{message.profile}/{message.conversation}"
    if message.workflowRunId:
        return (f"run:{message.workflowRunId}", conversation)
    return (conversation,)


@dataclass
class _Pending(Generic[T]):
    order: tuple[int, str]
    keys: tuple[str, ...]
    item: T | None
    held: bool = False  # a placeholder for a message waiting out a retry backoff


@dataclass
class KeyScheduler(Generic[T]):
    """Decides which claimed messages may start now.

    A message starts only when none of its keys is busy and no earlier pending message shares
    one of its keys; so messages sharing a key start in claim order, while messages of
    independent keys start at once, up to `max_concurrency` running.
    """

    max_concurrency: int
    locks: LockDirectory | None = None
    _pending: list[_Pending[T]] = field(default_factory=list)
    _busy: set[str] = field(default_factory=set)
    running: int = 0
    contended: bool = False  # a key was held by another process at the last `ready()`

    def add(self, order: tuple[int, str], keys: tuple[str, ...], item: T) -> None:
        """Adds a claimed message; a placeholder held for the same order is replaced in place."""
        for pending in self._pending:
            if pending.held and pending.order == order:
                pending.item, pending.keys, pending.held = item, keys, False
                return
        self._insert(_Pending(order, keys, item))

    def hold(self, order: tuple[int, str], keys: tuple[str, ...]) -> None:
        """Keeps a requeued message's place, so later messages of its keys wait for its retry."""
        self._insert(_Pending(order, keys, None, held=True))

    def release_hold(self, order: tuple[int, str]) -> None:
        """Drops a placeholder whose message will not come back (e.g. claimed elsewhere)."""
        self._pending = [p for p in self._pending if not (p.held and p.order == order)]

    def _insert(self, pending: _Pending[T]) -> None:
        index = len(self._pending)
        while index > 0 and self._pending[index - 1].order > pending.order:
            index -= 1
        self._pending.insert(index, pending)

    def ready(self) -> Iterator[tuple[tuple[str, ...], T]]:
        """Yields the messages that may start now and marks their keys busy."""
        blocked: set[str] = set()
        index = 0
        self.contended = False
        while index < len(self._pending) and self.running < self.max_concurrency:
            pending = self._pending[index]
            if (pending.held or blocked.intersection(pending.keys) or self._busy.intersection(pending.keys)
                    or not self._lock(pending.keys)):
                blocked.update(pending.keys)
                index += 1
                continue
            del self._pending[index]
            self._busy.update(pending.keys)
            self.running += 1
            assert pending.item is not None
            yield pending.keys, pending.item

    def _lock(self, keys: tuple[str, ...]) -> bool:
        """Takes the cross-process locks of `keys` (all or none)."""
        if self.locks is None:
            return True
        taken: list[str] = []
        for key in keys:
            if not self.locks.acquire(key):
                for done in taken:
                    self.locks.release(done)
                self.contended = True
                return False
            taken.append(key)
        return True

    def finish(self, keys: tuple[str, ...]) -> None:
        """Frees the keys of a message that finished (succeeded, failed or was requeued)."""
        self._busy.difference_update(keys)
        self.running -= 1
        if self.locks is not None:
            for key in keys:
                self.locks.release(key)

    def busy_keys(self) -> list[str]:
        return sorted(self._busy)

    def drain_pending(self) -> list[T]:
        """Removes and returns every claimed message that has not started (for shutdown)."""
        items = [p.item for p in self._pending if p.item is not None]
        self._pending.clear()
        return items

    @property
    def pending_count(self) -> int:
        return sum(1 for p in self._pending if not p.held)

    def is_busy(self, key: str) -> bool:
        return key in self._busy
