"""The audit record: one privileged action (who, where, what, when), appended once to the backend's AuditLog
(gateway/stores.py) and listed by `switchyard audit`. What counts as privileged is docs/roles.md's list."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

OPERATOR = "operator"
"""`by` of an action taken at the gateway's machine (a CLI command, the dashboard)."""


@dataclass(frozen=True)
class AuditRecord:
    """One privileged action. `id` makes the append idempotent: a retried message records its action once."""

    id: str
    at: str  # ISO 8601, UTC
    by: str  # `<channel>/<profile>/<senderId>`, or `operator` (with the OS user in `details`)
    where: str  # the conversation key, or `cli` / `dashboard`
    action: str  # e.g. `workflow.start_edit`, `approval.answer`, `dead.retry`
    what: str  # one line a person reads
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def new(cls, *, by: str, where: str, action: str, what: str, key: str | None = None,
            at: datetime | None = None, **details: Any) -> AuditRecord:
        """A record of now; `key` (e.g. the message's identity) names the occurrence, so recording it twice
        (a retried message) keeps one. Without a key every record is its own."""
        when = (at or datetime.now(UTC)).astimezone(UTC)
        stamp = when.isoformat(timespec="microseconds")
        seed = f"{action}\0{key}" if key is not None else f"{action}\0{by}\0{stamp}\0{what}"
        return cls(hashlib.sha256(seed.encode()).hexdigest()[:24], stamp, by, where, action, what, details)

    def to_json(self) -> dict[str, Any]:
        """The record as stored (a JSON object)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AuditRecord:
        """A stored record."""
        return cls(str(data["id"]), str(data["at"]), str(data["by"]), str(data["where"]), str(data["action"]),
                   str(data.get("what", "")), dict(data.get("details") or {}))

    def when(self) -> datetime:
        """`at` as a datetime."""
        return datetime.fromisoformat(self.at)


def operator_answer_key(approval_id: str) -> str:
    """The key of an operator's answer to an approval: the CLI that gives it and the turn that sees it record the
    same record."""
    return f"operator-answer/{approval_id.strip().lower()}"


def selected(records: list[AuditRecord], since: datetime | None, by: str | None) -> list[AuditRecord]:
    """The records at or after `since` whose `by` is `by` or ends with `/<by>` (a bare sender id), oldest first."""
    def wanted(record: AuditRecord) -> bool:
        if since is not None and record.when() < since:
            return False
        return by is None or record.by == by or record.by.endswith(f"/{by}")

    return sorted((r for r in records if wanted(r)), key=lambda r: (r.at, r.id))
