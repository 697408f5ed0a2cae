"""The embedded file backend (`queue.backend: files`, the default): every store is files in the home.

Declared through `switchyard_backends` like any backend; its modules are imported when a store is opened,
so building a plugin manager (as every command does) stays cheap.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from gateway.backends import StorageStatus
from gateway.composition import open_store
from gateway.hookspecs import hookimpl
from gateway.spool import deadletters
from gateway.stores import Duplicate, StoreKey, Stores, StoreT

if TYPE_CHECKING:
    from gateway.approvals import FileApprovals
    from gateway.backends import BackendFactory
    from gateway.backends.files.sharing import SharedHome
    from gateway.backends.runtime import Compose, Runtime, RuntimeParts
    from gateway.channelkit.pairing import Pairing
    from gateway.home import Home
    from gateway.models import IncomingPayload
    from gateway.settings import Settings
    from gateway.stores import Locks, StoreFactory


@hookimpl
def switchyard_backends() -> dict[str, BackendFactory]:
    """Declares the file backend."""
    return {"files": FileBackend}


@hookimpl
def switchyard_stores() -> dict[str, dict[str, StoreFactory]]:
    """Declares the file backend's audit log (gateway.stores.AUDIT): `state/audit.jsonl`."""
    return {"audit": {"files": _audit}}


def _audit(backend: FileBackend, *, command: bool = False) -> Any:
    from gateway.backends.files.audit import FileAuditLog

    return FileAuditLog(backend.home.state / "audit.jsonl", fsync=backend.settings.queue.fsync)


class FileBackend:
    """The file backend (gateway/composition.py's Backend): queue/, state/ and coordination/ of the home."""

    name = "files"
    in_home = True
    failures: tuple[type[BaseException], ...] = ()
    variables: tuple[tuple[str, str], ...] = ()
    dsn = None

    def __init__(self, home: Home, settings: Settings, stores: Stores):
        self.home = home
        self.settings = settings
        self._stores = stores
        self._sharing: SharedHome | None = None

    def pairing(self, *, command: bool = False) -> Pairing:
        from gateway.channelkit.access import PairingStore

        return PairingStore(self.home)

    def approvals(self, *, command: bool = False) -> FileApprovals:
        from gateway.approvals import FileApprovals

        return FileApprovals(self.home, fsync=self.settings.queue.fsync)

    @property
    def sharing(self) -> SharedHome:
        """Whether other processes share the home: one per backend, for its worker and its job locks."""
        if self._sharing is None:
            from gateway.backends.files.sharing import SharedHome

            self._sharing = SharedHome(self.home.state)
        return self._sharing

    def locks(self, *, holder: str | None = None, ttl_s: float = 60.0) -> Locks:
        """Lock files in coordination/locks/, kept only in memory while this process is alone on the home."""
        from gateway.backends.files.sharing import SoloLocks
        from gateway.disk.locks import LockDirectory, process_name

        files = LockDirectory(self.home.coordination / "locks",
                              holder=holder or process_name(), ttl_s=ttl_s)
        return SoloLocks(files, self.sharing)

    def dead_letters(self) -> FileDeadLetters:
        return FileDeadLetters(self.home)

    def replies(self) -> FileReplies:
        return FileReplies(self.home)

    def status(self, dead_shown: int) -> StorageStatus:
        from gateway.home import queue_depths

        dead = deadletters.list_dead(self.home)
        return StorageStatus(queue=queue_depths(self.home), dead_letter_count=len(dead), dead_letters=dead[:dead_shown])

    def runtime(self, parts: RuntimeParts, compose: Compose) -> Runtime:
        """The composed runtime on the home's folders (gateway/backends/files/processing.py)."""
        from gateway.backends.files.processing import FileProcessing

        return compose(FileProcessing(parts, self.sharing))

    def store(self, key: StoreKey[StoreT], **options: object) -> StoreT:
        return open_store(self, self._stores, key, **options)

    def close(self) -> None:
        """Nothing held open: every store opens its files as it goes."""


class FileDeadLetters:
    """The file backend's dead letters (queue/failed/), with the operations `dead` runs."""

    def __init__(self, home: Home):
        self.home = home

    def list_dead(self) -> list[deadletters.DeadLetter]:
        return deadletters.list_dead(self.home)

    def show(self, name: str) -> tuple[deadletters.DeadLetter, bytes]:
        return deadletters.show(self.home, name)

    def retry(self, names: list[str]) -> list[str]:
        return deadletters.retry(self.home, names)

    def retry_all(self) -> list[str]:
        return deadletters.retry_all(self.home)

    def drop(self, names: list[str]) -> list[str]:
        return deadletters.drop(self.home, names)

    def where(self, kind: str) -> str:
        return "outgoing/" if kind == "reply" else "incoming/"


class FileReplies:
    """The replies the file backend stored (outgoing/, then sent/), and the duplicates it skipped."""

    def __init__(self, home: Home):
        self.home = home

    def find(self, message: IncomingPayload, job: str) -> dict[str, Any] | Duplicate | None:
        """The reply to `message` stamped after it was queued, or Duplicate once its file `job` has left the
        queue unanswered because its identity was answered before."""
        from gateway.backends.files.answered import answered_before
        from gateway.home import stored_reply

        gone = not self._queued(job)  # looked at first: a message's replies are written before it leaves
        reply = stored_reply(self.home, message.messageId, message.timestamp)
        if reply is not None:
            return reply
        if gone and answered_before(self.home.state / "answered.jsonl", message, message.timestamp / 1000):
            return Duplicate()
        return None

    def _queued(self, job: str) -> bool:
        """Whether the payload file `job` waits in incoming/ or is claimed in a processing/ folder."""
        if (self.home.incoming / job).exists():
            return True
        with os.scandir(self.home.processing) as workers:
            return any(entry.is_dir() and os.path.exists(os.path.join(entry.path, job)) for entry in workers)

    def close(self) -> None:
        """Nothing held open."""
