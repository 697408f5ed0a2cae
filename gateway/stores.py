"""The gateway's stores as protocols: what every backend (files, PostgreSQL, memory) keeps, and how callers
use it. Each protocol is the set of methods the file and PostgreSQL implementations share and callers call;
tests/contract/ checks the rules written here once against every backend; gateway/backends/memory/ is the
in-memory backend (every store on a shared state: two handles are two hosts).

Pairing is defined beside its file store (gateway/channelkit/pairing.py); Locks' file implementation is
gateway/disk/locks.py LockDirectory. Only annotations name other modules' types, so importing this one stays
light (`switchyard status` imports it and must not load pydantic or the queue). The orchestrator's stores (runs,
sessions and conversation history) are in orchestrator/storage/stores.py, so the gateway never names
orchestrator types. The Backend that opens them is gateway/backends/__init__.py's: gateway/composition.py chooses
it, plugins declare it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from datetime import datetime

    from gateway.approvals import Approval
    from gateway.audit import AuditRecord
    from gateway.models import IncomingPayload
    from gateway.spool.deadletters import DeadLetter, Kind
    from gateway.spool.queue import Claimed

__all__ = [
    "AnsweredStore",
    "Approvals",
    "BackendUnreachable",
    "DeadLetterStore",
    "DeliveryJournalStore",
    "Duplicate",
    "EditFolding",
    "EventSink",
    "Locks",
    "QueueStore",
    "ReplyStore",
    "StoreFactory",
    "Stores",
]


@runtime_checkable
class AnsweredStore(Protocol):
    """Which messages were answered within the duplicate window (gateway/backends/files/answered.py AnsweredIndex): a
    message recorded is `contains` until the window passes or it is forgotten (a late dead letter), for
    every handle on the store. PostgreSQL: gateway/backends/postgres/answered.py PgAnswered over
    `switchyard_answered`, whose statements answering.py, outbox.py and latedead.py fold into their own."""

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
    """The parts of a multi-part reply already sent, by delivery key (gateway/channelkit/delivery.py DeliveryJournal),
    so a delivery taken over after a crash sends only the rest. PostgreSQL keeps the record on the reply's
    outbox row (gateway/backends/postgres/journal.py: PgJournal finds it by key; a running delivery writes it
    through rows.py RowJournal, fenced by its lease)."""

    def sent_parts(self, key: str) -> dict[int, str]:
        """Part index → platform message id, for the parts already sent."""

    def record(self, key: str, index: int, platform_id: str) -> None:
        """Records one sent part before the next is sent."""

    def forget(self, key: str) -> None:
        """Drops the record once the whole reply is delivered."""


@runtime_checkable
class DeadLetterStore(Protocol):
    """Dead letters as `switchyard dead` uses them (gateway/cli/dead.py): a dead letter keeps the original
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
    """Somewhere events are copied to besides the event log (gateway/backends/postgres/events.py EventSink: the
    database);
    attached to an EventLog as an observer. `observe` never blocks on or fails for its storage."""

    def observe(self, record: dict[str, Any]) -> None:
        """Takes one event (already redacted by the EventLog)."""

    def close(self, timeout: float = 5.0) -> None:
        """Stores what is buffered (waiting up to `timeout`) and stops."""


@runtime_checkable
class QueueStore(Protocol):
    """The inbound queue (gateway/spool/queue.py FileQueue, gateway/backends/memory/queue.py MemoryQueue,
    gateway/backends/postgres/queue.py PgQueue): takes payloads in, gives them out oldest first
    (skipping, in place, those whose ordering keys the caller does not admit), returns a failed one to its
    place in line, completes it, or dead-letters it with its bytes intact. Several handles may share one
    queue (processes on one home, or hosts on one database); what a handle that stopped had claimed is given
    back by `recover_dead_workers` on another, in its place. gateway/runtime/worker.py's Worker runs on each.
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

    def take_claim_errors(self) -> list[str]:
        """The reasons of the claims that failed since the last call (a file that cannot be moved)."""

    def rewrite_claimed(self, claimed: Claimed, data: bytes) -> None:
        """Replaces the bytes of a payload this handle claimed (an edit folded into it before it started)."""

    def start(self, claimed: Claimed) -> bytes | None:
        """Marks a claimed payload started (an edit no longer folds into it); its bytes as they are now, or
        None when it is no longer this handle's (given back as a stopped handle's: another runs it).
        ValueError (why) when it cannot be run here: it is then dead."""


@runtime_checkable
class EditFolding(Protocol):
    """Edits of waiting messages (FileQueue, gateway/backends/memory/queue.py MemoryQueue,
    gateway/backends/postgres/edits.py
    PgEdits). An edit is an ordinary payload with `editOf` (the original's messageId) and a messageId of its
    own. While the original waits (not yet claimed, back in line for a retry, or claimed by this process's worker
    but not started: the queue's `pending_edits`, set by gateway/runtime/worker.py) the edit replaces its text in
    place: same place in line, same name, same ordering keys, the original's messageId. Once it was taken the
    edit is not folded: the caller queues it as a new message of the conversation (the agent sees
    "(edited) …"). The decision is made by the same atomic step that claiming uses (a rename out of
    incoming/, the queue's lock, an UPDATE ... WHERE state = 'queued'), so an edit racing a claim is either
    folded before the claim or queued after it: never both, never neither. Whether an edit may be folded is
    gateway.channelkit.edits.edited_bytes's rule, written once (only the original's sender edits it); a caller takes a
    payload in through gateway.channelkit.edits.to_queue."""

    def fold_edit(self, edit: IncomingPayload) -> bool:
        """True when the original of `edit` (same channel, profile and conversation, messageId `editOf`) was
        waiting and now holds the edit's text; False when it is not waiting (taken, answered, unknown).
        Raises gateway.channelkit.edits.ForeignEdit, leaving it as it was, when it waits but another sender wrote it."""


@runtime_checkable
class Approvals(Protocol):
    """Tool approvals asked in chat (gateway/approvals.py: the record and its rules; FileApprovals,
    gateway/backends/postgres/approvals.py PgApprovals, gateway/backends/memory/approvals.py MemoryApprovals):
    durable, shared by
    every process and host of the backend, each settled once, first come."""

    def request(self, approval: Approval) -> None:
        """Stores a new pending approval (and prunes those settled over a day ago)."""

    def get(self, approval_id: str) -> Approval | None:
        """The approval with this id, pending or settled; None when unknown (or pruned)."""

    def pending(self) -> list[Approval]:
        """Every pending approval, oldest first (expired ones too, until someone settles them)."""

    def settle(self, approval_id: str, state: str, *, choice: str | None = None, by: str | None = None,
               reason: str | None = None) -> tuple[Approval | None, bool]:
        """Settles a pending approval as `state` (answered with `choice` by `by`, or closed for `reason`):
        (the approval as stored now, True); one already settled is left as it is: (it, False); an unknown
        id: (None, False). Of two callers at once, on any hosts, exactly one gets True."""


class Locks(Protocol):
    """TTL locks, one holder per resource: LockDirectory (files) or the postgres backend's (`Backend.locks`)."""

    holder: str
    ttl_s: float

    @property
    def reclaimed(self) -> int:
        """Stale locks taken over (their holder may have died mid-work)."""

    def acquire(self, resource: str) -> bool: ...
    def release(self, resource: str) -> None: ...
    def renew(self, resources: list[str]) -> list[str]:
        """Moves the expiry of held locks forward; returns those still held (a lock lost meanwhile is not)."""
    def clean_expired(self) -> list[str]: ...


@runtime_checkable
class AuditLog(Protocol):
    """The audit records of privileged actions (gateway/audit.py): append-only, each record kept once by its id,
    shared by every process and host of the backend (FileAuditLog, gateway/backends/postgres/audit.py PgAuditLog,
    gateway/backends/memory/audit.py MemoryAuditLog). Declared as the store AUDIT (`switchyard_stores`)."""

    def append(self, record: AuditRecord) -> bool:
        """Adds the record; False (and nothing added) when a record with its id is stored already."""

    def records(self, *, since: datetime | None = None, by: str | None = None) -> list[AuditRecord]:
        """The records at or after `since` by `by` (a full `by`, or a bare sender id), oldest first."""


# --- the backend: what one storage backend opens (chosen in gateway/composition.py) ---

StoreT = TypeVar("StoreT")


@dataclass(frozen=True)
class StoreKey(Generic[StoreT]):
    """A store a plugin declares (`switchyard_stores`) by its name, typed with what it opens as: the
    orchestrator's `StoreKey[RunStoreBase]("runs")` makes `backend.store(RUNS)` a RunStoreBase."""

    name: str


AUDIT: StoreKey[AuditLog] = StoreKey("audit")
"""The audit log, declared by each backend's plugin for its backend."""

StoreFactory = Callable[..., object]
Stores = dict[str, dict[str, StoreFactory]]
"""store name -> backend name -> factory `(backend, **options) -> store`."""


class BackendUnreachable(Exception):
    """The backend's storage cannot be used (a database that is down); the message is one line, no secret."""


class Duplicate:
    """What a ReplyStore finds for a message the gateway skipped as a duplicate: its identity (channel,
    profile, messageId) was answered before it was queued, within `queue.duplicate_window_sec`."""

    def __repr__(self) -> str:
        return "Duplicate()"


class ReplyStore(Protocol):
    """Where a backend keeps the replies it stored, as `send --wait` looks them up (gateway/cli/backends.py
    waits): one look each call, no waiting."""

    def find(self, message: IncomingPayload, job: str) -> dict[str, Any] | Duplicate | None:
        """The reply to `message`, queued as `job` (a reply stored before it was queued is another message's;
        a progress note or a draft is not the reply), Duplicate once the gateway skipped it as one, else None."""

    def close(self) -> None:
        """Releases what the looks held open."""
