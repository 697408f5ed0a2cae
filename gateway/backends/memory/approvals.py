"""In-memory tool approvals (gateway.stores.Approvals), with the file store's rules; `twin()` is another host's."""

from __future__ import annotations

import threading
import time

from gateway.approvals import PENDING, SETTLED_KEPT_S, Approval


class MemoryApprovals:
    """Approvals by id on a state shared by every handle made from it (two handles are two hosts)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_id: dict[str, Approval] = {}

    def twin(self) -> MemoryApprovals:
        """A second handle on the same approvals (another host)."""
        other = MemoryApprovals()
        other._lock, other._by_id = self._lock, self._by_id
        return other

    def request(self, approval: Approval) -> None:
        now = time.time()
        with self._lock:
            for key, known in list(self._by_id.items()):
                if known.state != PENDING and (known.settled_at or now) + SETTLED_KEPT_S < now:
                    del self._by_id[key]
            self._by_id[approval.id] = approval

    def get(self, approval_id: str) -> Approval | None:
        with self._lock:
            return self._by_id.get(approval_id)

    def pending(self) -> list[Approval]:
        with self._lock:
            found = [approval for approval in self._by_id.values() if approval.pending]
        return sorted(found, key=lambda approval: (approval.created_at, approval.id))

    def settle(self, approval_id: str, state: str, *, choice: str | None = None, by: str | None = None,
               reason: str | None = None) -> tuple[Approval | None, bool]:
        with self._lock:
            current = self._by_id.get(approval_id)
            if current is None or not current.pending:
                return current, False
            done = current.settled(state, choice=choice, by=by, reason=reason)
            self._by_id[approval_id] = done
            return done, True
