"""What the file backend gives the composed runtime (gateway/runtime/composed.py): incoming/ itself as the
queue, the answered index of state/, lock files in coordination/locks/ and the home's sharing (a process alone
on its home takes no key locks), dead letters into failed/."""

from __future__ import annotations

from collections.abc import Callable

from gateway.backends.files.answered import AnsweredIndex
from gateway.backends.files.latedead import FileLateDeadLetters
from gateway.backends.files.sharing import SharedHome
from gateway.backends.runtime import Processing, QueueView, RuntimeParts, Watch, WorkerStores
from gateway.disk.locks import LockDirectory, process_name
from gateway.models import IncomingPayload
from gateway.outbox import BaseOutbox
from gateway.spool.folders import FolderView


class FileProcessing(Processing):
    """gateway.backends.runtime.Processing of the home's folders (its replies: the home's queue/outgoing/)."""

    def __init__(self, parts: RuntimeParts, sharing: SharedHome):
        home, qs = parts.home, parts.settings.queue
        self.home = home
        self.queue = parts.queue
        self.answered = AnsweredIndex(home.state / "answered.jsonl", window_sec=qs.duplicate_window_sec,
                                      fsync=qs.fsync)
        self.locks = LockDirectory(home.coordination / "locks", holder=process_name(), ttl_s=qs.lock_ttl_sec)
        self.sharing = sharing  # the backend's: its job locks follow the same mode
        self.late_dead = FileLateDeadLetters(home, self.answered, fsync=qs.fsync,
                                             max_payload_bytes=qs.max_payload_bytes)

    @property
    def home_mode(self) -> str:
        return self.sharing.mode

    def worker_stores(self, outbox: BaseOutbox) -> WorkerStores:
        """incoming/ itself, the answered index, the lock files (taken once the home is shared)."""
        return WorkerStores(self.queue, self.answered, outbox, locks=self.locks, sharing=self.sharing)

    def open(self) -> None:
        """Opens the answered index and takes this process's place on the home (before the handler starts:
        its job locks follow the home's mode from its first recovery on)."""
        self.answered.open()
        self.sharing.open()

    def watch(self, watch: Watch, share_requested: Callable[[], None]) -> None:
        """Watches the requests of other processes to share the home."""
        watch(self.sharing.requests, lambda name: share_requested(), share_requested)
        share_requested()

    def queue_view(self) -> QueueView:
        return FolderView(self.home)

    def dead_letter(self, message: IncomingPayload, reason: str, errors: list[str]) -> str | None:
        """gateway.api.LateDeadLetter: into failed/ (gateway/backends/files/latedead.py)."""
        return self.late_dead.bury(message, reason, errors)

    def close(self) -> None:
        self.answered.close()
        self.sharing.close()
