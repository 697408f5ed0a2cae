"""The in-memory queue and its dead letters (gateway.stores.QueueStore, DeadLetterStore).

Payloads wait in one shared line ordered by their place (given when taken in, kept through retries and
recoveries); a handle claims the oldest eligible one it admits, as a FileQueue claims by rename. A handle
that is closed without completing its claims is a process that died: `open` or `recover_dead_workers` on
any handle puts its claims back in their place, with their attempts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.channelkit.edits import edited_bytes
from gateway.home import safe_name
from gateway.spool.deadletters import DeadLetter, Kind
from gateway.spool.queue import Claimed
from gateway.telemetry.events import utc_now_iso

if TYPE_CHECKING:
    from gateway.models import IncomingPayload

MAX_ERRORS = 20  # errors kept per payload, as FileQueue keeps


@dataclass
class _Item:
    order: int
    data: bytes
    not_before: float = 0.0  # on the monotonic clock


@dataclass
class _Dead:
    order: int
    data: bytes
    original: str
    report: dict[str, Any]
    stamp: int


@dataclass
class QueueState:
    """What every handle on one queue sees: waiting, claimed (by handle) and dead payloads, attempts."""

    lock: threading.RLock = field(default_factory=threading.RLock)
    incoming: dict[str, _Item] = field(default_factory=dict)
    claimed: dict[str, tuple[str, _Item]] = field(default_factory=dict)
    attempts: dict[str, tuple[int, list[str]]] = field(default_factory=dict)
    failed: dict[str, _Dead] = field(default_factory=dict)
    open_handles: set[str] = field(default_factory=set)
    taken_in: dict[str, str] = field(default_factory=dict)
    """The identity of each message taken in and its name: a spool file taken in again (its host died
    before completing it) is not queued twice, as postgres's intake ignores a row it already holds."""
    sequence: int = 0
    watchers: list[Callable[[], None]] = field(default_factory=list)
    """Called (under the lock: they must only schedule) when a payload comes into line, so every
    host's worker looks, as a file watch or a database notification wakes it."""

    def next(self) -> int:
        self.sequence += 1
        return self.sequence

    def changed(self) -> None:
        for watcher in list(self.watchers):
            watcher()


class MemoryQueue:
    """One handle (a worker) on a QueueState; `worker` names it as a processing folder names a process."""

    def __init__(self, state: QueueState, *, worker: str = "w1", max_payload_bytes: int = 1_048_576):
        self.state = state
        self.worker = worker
        self.max_payload_bytes = max_payload_bytes
        self._deferred: set[str] = set()
        self.pending_edits: Callable[[IncomingPayload], bool] | None = None  # set by the worker

    def open(self) -> list[str]:
        with self.state.lock:
            self.state.open_handles.add(self.worker)
            return self._recover(include_own=True)

    def close(self) -> None:
        with self.state.lock:
            self.state.open_handles.discard(self.worker)

    def recover_dead_workers(self) -> list[str]:
        with self.state.lock:
            return self._recover(include_own=False)

    def _recover(self, *, include_own: bool) -> list[str]:
        actions = []
        for name, (worker, item) in list(self.state.claimed.items()):
            if worker not in self.state.open_handles or (include_own and worker == self.worker):
                del self.state.claimed[name]
                self.state.incoming[name] = _Item(item.order, item.data)
                actions.append(f"returned {name} to incoming as {name}")
        if actions:
            self.state.changed()
        return actions

    def enqueue(self, data: bytes, *, hint: str = "msg", identity: str | None = None) -> Path:
        """Puts a payload at the end of the line; one whose `identity` was taken in before is not put again
        (the name it has is returned)."""
        with self.state.lock:
            if identity is not None and identity in self.state.taken_in:
                return Path("memory:incoming") / self.state.taken_in[identity]
            order = self.state.next()
            name = f"{order:020d}-{safe_name(hint)}.json"
            self.state.incoming[name] = _Item(order, bytes(data))
            if identity is not None:
                self.state.taken_in[identity] = name
            self.state.changed()
        return Path("memory:incoming") / name

    def fold_edit(self, edit: IncomingPayload) -> bool:
        """Puts an edit's text into its original while that one waits in line (gateway.stores.EditFolding):
        under the queue's lock, which a claim takes too."""
        if not edit.editOf:
            return False
        with self.state.lock:
            for item in self.state.incoming.values():
                edited = edited_bytes(item.data, edit)
                if edited is not None:
                    item.data = edited
                    return True
        return self.pending_edits is not None and self.pending_edits(edit)  # claimed by the worker, not started

    def rewrite_claimed(self, claimed: Claimed, data: bytes) -> None:
        """Replaces the bytes of a payload this handle claimed (an edit folded into it before it started)."""
        with self.state.lock:
            held = self.state.claimed.get(claimed.name)
            if held is not None:
                held[1].data = bytes(data)

    def start(self, claimed: Claimed) -> bytes:
        """Its bytes as claimed: an edit folds into a claimed payload through the worker (`pending_edits`)."""
        return claimed.data

    def rescan(self) -> None:
        """Nothing to index: every handle reads the shared line."""

    def notice(self, name: str) -> None:
        """Nothing to index: every handle reads the shared line."""

    def _eligible(self) -> list[tuple[int, str]]:
        now = time.monotonic()
        return sorted((item.order, name) for name, item in self.state.incoming.items()
                      if item.not_before <= now and name not in self._deferred)

    def claim(self) -> Claimed | None:
        with self.state.lock:
            eligible = self._eligible()
            return self._take(eligible[0][1]) if eligible else None

    def claim_admitted(self, keys_of: Callable[[bytes], tuple[str, ...]],
                       admit: Callable[[tuple[str, ...]], bool]) -> Claimed | None:
        with self.state.lock:
            for _, name in self._eligible():
                keys = keys_of(self.state.incoming[name].data)
                if keys and not admit(keys):
                    self._deferred.add(name)
                    continue
                return self._take(name)
        return None

    def end_pass(self) -> None:
        self._deferred.clear()

    def _take(self, name: str) -> Claimed:
        item = self.state.incoming.pop(name)
        self.state.claimed[name] = (self.worker, item)
        attempts, errors = self.state.attempts.get(name, (0, []))
        return Claimed(name, Path("memory:processing") / self.worker / name, item.data, (item.order, name),
                       attempts, list(errors))

    def next_due_in(self) -> float | None:
        now = time.monotonic()
        with self.state.lock:
            waiting = [item.not_before for item in self.state.incoming.values() if item.not_before > now]
        return max(0.0, min(waiting) - now) if waiting else None

    def take_claim_errors(self) -> list[str]:
        return []  # a claim in memory cannot fail

    def take_vanished(self) -> list[tuple[int, str]]:
        return []  # no handle keeps an index of its own that could go stale

    def _put_back(self, claimed: Claimed, delay_s: float) -> None:
        _, item = self.state.claimed.pop(claimed.name)
        self.state.incoming[claimed.name] = _Item(item.order, item.data, time.monotonic() + delay_s)
        self.state.changed()

    def requeue(self, claimed: Claimed, error: str, delay_s: float) -> int:
        with self.state.lock:
            attempts = claimed.attempts + 1
            self.state.attempts[claimed.name] = (attempts, [*claimed.errors, error][-MAX_ERRORS:])
            self._put_back(claimed, delay_s)
        return attempts

    def release(self, claimed: Claimed, delay_s: float) -> None:
        with self.state.lock:
            self._put_back(claimed, delay_s)

    def complete(self, claimed: Claimed) -> None:
        with self.state.lock:
            self.state.claimed.pop(claimed.name, None)
            self.state.attempts.pop(claimed.name, None)

    def dead_letter(self, claimed: Claimed, reason: str, *, attempts: int | None = None,
                    conversation: str | None = None) -> Path:
        with self.state.lock:
            _, item = self.state.claimed.pop(claimed.name)
            self.state.attempts.pop(claimed.name, None)
            name = self._bury(claimed.name, item.order, item.data, reason,
                              attempts if attempts is not None else claimed.attempts, claimed.errors, conversation)
        return Path("memory:failed") / name

    def bury(self, name: str, data: bytes, reason: str, errors: list[str], *, conversation: str | None,
             holds: Callable[[bytes], bool]) -> str | None:
        """Dead-letters under `name` a payload answered and then failed for good (gateway.api.LateDeadLetter),
        as gateway/backends/files/latedead.py does: `name` again if that letter is there already; None while a payload
        that `holds` accepts is in line or claimed (its worker is not done with it: asked again later)."""
        with self.state.lock:
            if name in self.state.failed:
                return name
            queued = [*self.state.incoming.values(), *(item for _, item in self.state.claimed.values())]
            if any(holds(item.data) for item in queued):
                return None
            return self._bury(name, self.state.next(), bytes(data), reason, 1, errors, conversation)

    def _bury(self, original: str, order: int, data: bytes, reason: str, attempts: int, errors: list[str],
              conversation: str | None) -> str:
        name = original if original not in self.state.failed else f"{time.time_ns()}-{original}"
        report = {"reason": reason, "attempts": attempts, "errors": errors, "conversation": conversation,
                  "failed_at": utc_now_iso()}
        self.state.failed[name] = _Dead(order, data, original, report, self.state.next())
        return name


class MemoryDeadLetters:
    """The dead letters of a QueueState, as `switchyard dead` uses them (gateway.stores.DeadLetterStore):
    messages only (the in-memory backend has no outbox)."""

    def __init__(self, state: QueueState):
        self.state = state

    def _letter(self, name: str, dead: _Dead) -> DeadLetter:
        report = dead.report
        return DeadLetter(name, "message", str(report["reason"]), int(report["attempts"]), report["failed_at"],
                          report["conversation"], Path("memory:failed") / name)

    def list_dead(self) -> list[DeadLetter]:
        with self.state.lock:
            found = sorted(self.state.failed.items(), key=lambda item: item[1].stamp, reverse=True)
            return [self._letter(name, dead) for name, dead in found]

    def show(self, name: str) -> tuple[DeadLetter, bytes]:
        with self.state.lock:
            dead = self.state.failed.get(name)
            if dead is None:
                raise KeyError(name)
            return self._letter(name, dead), dead.data

    def _known(self, names: list[str]) -> list[str]:
        unknown = [name for name in names if name not in self.state.failed]
        if unknown:
            raise KeyError(", ".join(unknown))
        return list(dict.fromkeys(names))

    def retry(self, names: list[str]) -> list[str]:
        with self.state.lock:
            return [self._retry_one(name) for name in self._known(names)]

    def retry_all(self) -> list[str]:
        with self.state.lock:
            return [self._retry_one(name) for name in sorted(self.state.failed)]

    def _retry_one(self, name: str) -> str:
        """Back in line in its old place, attempts from zero, under its original name (a variant if taken)."""
        dead = self.state.failed.pop(name)
        target = dead.original
        if target in self.state.incoming or target in self.state.claimed:
            target = f"{target}.retried-{time.time_ns()}"
        self.state.attempts.pop(target, None)
        self.state.incoming[target] = _Item(dead.order, dead.data)
        self.state.changed()
        return name

    def drop(self, names: list[str]) -> list[str]:
        with self.state.lock:
            wanted = self._known(names)
            for name in wanted:
                del self.state.failed[name]
            return wanted

    def where(self, kind: Kind) -> str:
        return "queue"
