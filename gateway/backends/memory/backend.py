"""The in-memory backend as a Backend of the composition (gateway/composition.py), for tests only.

It is never offered to users: a memory queue loses every message when its process ends. So it is in no
entry point and not in BACKEND_PLUGINS, and settings.yaml cannot name it (`queue.backend` accepts files
and postgres). A test selects it in two steps: registers a `MemoryBackendPlugin` (which declares the
backend "memory" through `switchyard_backends`, on the plugin's MemoryState) with the Gateway's plugin
manager, and gives the Gateway `memory_settings(settings)`. Every Gateway given plugins on one
MemoryState is one host of one backend: two Gateways on one state are two hosts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.backends import StorageStatus
from gateway.backends.memory.approvals import MemoryApprovals
from gateway.backends.memory.queue import MemoryDeadLetters
from gateway.backends.memory.state import MemoryState
from gateway.backends.memory.stores import MemoryLocks, MemoryPairing
from gateway.composition import open_store
from gateway.home import stored_reply
from gateway.hookspecs import hookimpl
from gateway.payloads import message_identity
from gateway.stores import Duplicate

if TYPE_CHECKING:
    from gateway.backends import BackendFactory
    from gateway.backends.memory.audit import MemoryAuditLog
    from gateway.backends.runtime import Compose, Runtime, RuntimeParts
    from gateway.home import Home
    from gateway.models import IncomingPayload
    from gateway.settings import Settings
    from gateway.stores import StoreFactory, StoreKey, Stores, StoreT


def memory_settings(settings: Settings) -> Settings:
    """`settings` on the in-memory backend (a test registers MemoryBackendPlugin; no installed plugin declares
    "memory", so a settings.yaml naming it gets `check`'s "no installed plugin provides the backend")."""
    return settings.model_copy(update={"queue": settings.queue.model_copy(update={"backend": "memory"})})


class MemoryBackendPlugin:
    """Declares the backend "memory" on `state` (a new one when None); a test registers it."""

    def __init__(self, state: MemoryState | None = None):
        self.state = state if state is not None else MemoryState()

    @hookimpl
    def switchyard_backends(self) -> dict[str, BackendFactory]:
        return {"memory": self._open}

    @hookimpl
    def switchyard_stores(self) -> dict[str, dict[str, StoreFactory]]:
        """Declares the in-memory audit log (gateway.stores.AUDIT) on the plugin's state."""
        return {"audit": {"memory": self._audit}}

    def _audit(self, backend: MemoryBackend, *, command: bool = False) -> MemoryAuditLog:
        return self.state.audit.twin()

    def _open(self, home: Home, settings: Settings, stores: Stores) -> MemoryBackend:
        return MemoryBackend(home, settings, stores, self.state)


class MemoryBackend:
    """The in-memory backend (gateway/composition.py's Backend): the state's stores; replies are the home's
    files, as on the file backend (no memory outbox)."""

    name = "memory"
    in_home = False
    failures: tuple[type[BaseException], ...] = ()
    variables: tuple[tuple[str, str], ...] = ()
    dsn = None

    def __init__(self, home: Home, settings: Settings, stores: Stores, state: MemoryState):
        self.home = home
        self.settings = settings
        self._stores = stores
        self.state = state

    def pairing(self, *, command: bool = False) -> MemoryPairing:
        return self.state.pairing.twin()

    def approvals(self, *, command: bool = False) -> MemoryApprovals:
        return self.state.approvals.twin()

    def locks(self, *, holder: str | None = None, ttl_s: float = 60.0) -> MemoryLocks:
        return MemoryLocks(self.state.locks, holder=holder or "memory-command", ttl_s=ttl_s)

    def dead_letters(self) -> MemoryDeadLetters:
        return MemoryDeadLetters(self.state.queue)

    def replies(self) -> MemoryReplies:
        return MemoryReplies(self.home, self.state)

    def status(self, dead_shown: int) -> StorageStatus:
        queue = self.state.queue
        with queue.lock:
            depths = {"incoming": len(queue.incoming), "processing": len(queue.claimed), "failed": len(queue.failed)}
        dead = self.dead_letters().list_dead()
        return StorageStatus(queue=depths, dead_letter_count=len(dead), dead_letters=dead[:dead_shown])

    def runtime(self, parts: RuntimeParts, compose: Compose) -> Runtime:
        """The composed runtime of one host on the shared state (gateway/backends/memory/processing.py)."""
        from gateway.backends.memory.processing import MemoryProcessing

        return compose(MemoryProcessing(parts, self.state))

    def store(self, key: StoreKey[StoreT], **options: object) -> StoreT:
        return open_store(self, self._stores, key, **options)

    def close(self) -> None:
        """Nothing held open: the state lives as long as the test keeps it."""


class MemoryReplies:
    """The replies a host wrote into its home (outgoing/, then sent/), and the duplicates the shared worker
    skipped."""

    def __init__(self, home: Home, state: MemoryState):
        self.home = home
        self.state = state

    def find(self, message: IncomingPayload, job: str) -> dict[str, Any] | Duplicate | None:
        """The reply to `message` stamped after it was queued, or Duplicate once it has left the queue
        unanswered because its identity was answered before it was queued."""
        identity = message_identity(message)
        queue = self.state.queue
        with queue.lock:  # looked at first: a message's replies are written before it leaves
            name = queue.taken_in.get(identity)
            queued = (self.home.incoming / job).exists() or name is None or name in queue.incoming \
                or name in queue.claimed
        reply = stored_reply(self.home, message.messageId, message.timestamp)
        if reply is not None:
            return reply
        with self.state.answered.lock:
            answered = self.state.answered.seen.get(identity)
        if not queued and answered is not None and answered < message.timestamp / 1000:
            return Duplicate()
        return None

    def close(self) -> None:
        """Nothing held open."""
