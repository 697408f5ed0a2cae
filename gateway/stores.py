"""The gateway's stores as protocols: what every backend (files, PostgreSQL, memory) keeps, and how callers
use it. Each protocol is the set of methods the file and PostgreSQL implementations share and callers call;
tests/contract/ checks the rules written here once against every backend; gateway/memory/ is the
in-memory backend (every store on a shared state: two handles are two hosts).

Pairing and Locks were defined beside their file stores (gateway/access.py, gateway/locks.py) and are
re-exported here, so this module names every store. The orchestrator's stores (runs, sessions and
conversation history) are in orchestrator/stores.py, so the gateway never names orchestrator types.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from gateway.access import Pairing
from gateway.deadletters import DeadLetter, Kind
from gateway.locks import Locks
from gateway.models import IncomingPayload
from gateway.queue import Claimed

__all__ = ["AnsweredStore", "DeadLetterStore", "DeliveryJournalStore", "EventSink", "Locks", "Pairing",
           "QueueStore"]


@runtime_checkable
class AnsweredStore(Protocol):
    """Which messages were answered within the duplicate window (gateway/answered.py AnsweredIndex): a
    message recorded is `contains` until the window passes or it is forgotten (a late dead letter), for
    every handle on the store. PostgreSQL has no such object today: `switchyard_answered` is read and
    written by statements inside gateway/pg/processing.py, outbox.py and latedead.py."""

    def contains(self, message: IncomingPayload) -> bool:
        """True when `message` (by channel, profile and messageId) was answered within the window."""

    def record(self, message: IncomingPayload) -> None:
        """Records that `message` was answered (its replies are stored already)."""

    def forget(self, message: IncomingPayload) -> None:
        """Counts `message` as unanswered again, so a retry runs it instead of skipping it."""

    def close(self) -> None:
        """Releases what this handle holds open."""


@runtime_checkable
class DeliveryJournalStore(Protocol):
    """The parts of a multi-part reply already sent, by delivery key (gateway/delivery.py DeliveryJournal),
    so a delivery taken over after a crash sends only the rest. PostgreSQL keeps the same record on the
    outbox row (gateway/pg/delivery.py RowJournal, bound to a leased row: not this protocol)."""

    def sent_parts(self, key: str) -> dict[int, str]:
        """Part index → platform message id, for the parts already sent."""

    def record(self, key: str, index: int, platform_id: str) -> None:
        """Records one sent part before the next is sent."""

    def forget(self, key: str) -> None:
        """Drops the record once the whole reply is delivered."""


@runtime_checkable
class DeadLetterStore(Protocol):
    """Dead letters as `switchyard dead` uses them (gateway/deadcli.py): a dead letter keeps the original
    bytes and the reason; retry puts it back with a fresh attempt count, drop deletes it. An unknown name
    is a KeyError and changes nothing."""

    def list_dead(self) -> list[DeadLetter]:
        """Every dead letter, newest first."""

    def show(self, name: str) -> tuple[DeadLetter, bytes]:
        """One dead letter and its payload bytes."""

    def retry(self, names: list[str]) -> list[str]:
        """Puts these dead letters back where they came from; returns the names put back."""

    def retry_all(self) -> list[str]:
        """Puts every dead letter back; returns the names put back."""

    def drop(self, names: list[str]) -> list[str]:
        """Deletes these dead letters; returns the names deleted."""

    def where(self, kind: Kind) -> str:
        """Where a retried letter of `kind` goes, as `dead retry` says it."""


@runtime_checkable
class EventSink(Protocol):
    """Somewhere events are copied to besides the event log (gateway/pg/events.py EventSink: the database);
    attached to an EventLog as an observer. `observe` never blocks on or fails for its storage."""

    def observe(self, record: dict[str, Any]) -> None:
        """Takes one event (already redacted by the EventLog)."""

    def close(self, timeout: float = 5.0) -> None:
        """Stores what is buffered (waiting up to `timeout`) and stops."""


@runtime_checkable
class QueueStore(Protocol):
    """The inbound queue (gateway/queue.py FileQueue): takes payloads in, gives them out oldest first
    (skipping, in place, those whose ordering keys the caller does not admit), returns a failed one to its
    place in line, completes it, or dead-letters it with its bytes intact. Several handles may share one
    queue (processes on one home); what a handle that stopped had claimed is given back by
    `recover_dead_workers` on another, in its place.

    The PostgreSQL queue (gateway/pg/intake.py, jobs.py, processing.py) does not satisfy this protocol:
    a message is stored on intake and run by Procrastinate jobs locked per key, so claiming, retrying and
    dead-lettering are SQL inside its processing, not operations of a queue object.
    """

    def open(self) -> list[str]:
        """Prepares the queue and recovers what stopped handles left claimed; a line per recovery."""

    def close(self) -> None:
        """Releases this handle; what it still has claimed is recovered by the next one that opens."""

    def enqueue(self, data: bytes, *, hint: str = "msg") -> Path:
        """Takes in one payload under a sortable unique name (found by `rescan` or `notice`)."""

    def rescan(self) -> None:
        """Indexes every payload not yet known (taken in by another handle, or the backlog)."""

    def notice(self, name: str) -> None:
        """Indexes one payload that just arrived."""

    def claim(self) -> Claimed | None:
        """Claims the oldest eligible payload; None when none is ready."""

    def claim_admitted(self, keys_of: Callable[[bytes], tuple[str, ...]],
                       admit: Callable[[tuple[str, ...]], bool]) -> Claimed | None:
        """Claims the oldest eligible payload whose keys (`keys_of(bytes)`) `admit` accepts; a refused one
        keeps its place and is set aside until `end_pass`."""

    def end_pass(self) -> None:
        """Puts the payloads `claim_admitted` set aside back in line."""

    def next_due_in(self) -> float | None:
        """Seconds until the earliest backing-off payload is eligible (None if none waits)."""

    def requeue(self, claimed: Claimed, error: str, delay_s: float) -> int:
        """Counts a failed attempt and puts the payload back in its place, eligible after `delay_s`;
        returns the attempts so far."""

    def release(self, claimed: Claimed, delay_s: float) -> None:
        """Puts the payload back in its place uncounted."""

    def complete(self, claimed: Claimed) -> None:
        """Removes a payload whose replies are stored."""

    def dead_letter(self, claimed: Claimed, reason: str, *, attempts: int | None = None,
                    conversation: str | None = None) -> Path:
        """Moves the payload's original bytes to the dead letters with `reason`."""

    def recover_dead_workers(self) -> list[str]:
        """Gives back, in their place, what handles that stopped had claimed."""

    def take_vanished(self) -> list[tuple[int, str]]:
        """Orders of indexed payloads that were gone when claimed (taken by another handle)."""
