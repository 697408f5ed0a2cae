"""Tool approvals asked in chat: the record every backend's store keeps (gateway.stores.Approvals), its
rules, and the file backend's store (`queue/state/approvals.json`, locked for writers).

An approval is `pending` until it is settled once: `answered` (with the chosen option, or none for a
deny without a matching option), `expired`, `abandoned` (its process is gone) or `cancelled` (its turn was
stopped). Settling is first-come: a second answer changes nothing and is told who answered first.
"""

from __future__ import annotations

import fcntl
import json
import re
import secrets
import string
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from gateway.disk.locks import holder_process, pid_alive
from gateway.home import atomic_write
from gateway.scope import ConversationScope

if TYPE_CHECKING:
    from gateway.home import Home

PENDING = "pending"
ANSWERED = "answered"
EXPIRED = "expired"
ABANDONED = "abandoned"
CANCELLED = "cancelled"
CLOSED_STATES = frozenset({EXPIRED, ABANDONED, CANCELLED})
SETTLED_KEPT_S = 86_400.0  # a settled approval is kept a day, so a late tap is told it was answered; then pruned
BUTTON_PREFIX = "ap:"
_ID_ALPHABET = string.ascii_lowercase + string.digits
_BUTTON = re.compile(r"^ap:([a-z0-9]{1,16}):(\d{1,3})$")
ADDRESS_FIELDS = ("channel", "channelProfileId", "conversationId", "sender", "senderId", "messageId",
                  "workflowRunId", "workflowStepId")
"""The fields of the message a question replies to (what a reply to the conversation needs)."""


def new_id() -> str:
    """A fresh approval id: 12 lowercase letters and digits (button ids allow 16)."""
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(12))


def button_id(approval_id: str, index: int) -> str:
    """The id of the button answering `approval_id` with its option number `index` (from 0)."""
    return f"{BUTTON_PREFIX}{approval_id}:{index}"


def parse_button(button: str) -> tuple[str, int] | None:
    """(approval id, option index) of an approval button's id; None for any other id."""
    found = _BUTTON.match(button)
    return (found.group(1), int(found.group(2))) if found else None


def owner_gone(owner: str, me: str) -> bool:
    """Whether the process `owner` has surely ended, as seen from process `me`: on this host, not `me`, and
    its pid is gone or is `me`'s own (a restarted container). An owner on another host is not judged."""
    host, pid = holder_process(owner)
    my_host, my_pid = holder_process(me)
    if owner == me or host != my_host or pid is None:
        return False
    return pid == my_pid or not pid_alive(pid)


@dataclass(frozen=True)
class Approval:
    """One question to the chat: may the agent run this tool call? Times are epoch seconds."""

    id: str
    scope: str
    address: dict[str, Any]
    title: str
    options: list[dict[str, str]]
    owner: str
    created_at: float
    expires_at: float
    detail: str = ""
    state: str = PENDING
    choice: str | None = None
    answered_by: str | None = None
    settled_at: float | None = None
    reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pending(self) -> bool:
        return self.state == PENDING

    def option_index(self, option_id: str | None) -> int | None:
        """The index of the option `option_id`, or None."""
        ids = [option["id"] for option in self.options]
        return ids.index(option_id) if option_id in ids else None

    def allowed(self) -> bool:
        """Whether it was answered with an option that allows the call."""
        index = self.option_index(self.choice)
        return self.state == ANSWERED and index is not None and self.options[index]["kind"].startswith("allow")

    def choice_for(self, verdict: str) -> str | None:
        """The option an operator's `allow` or `deny` picks: the one-time kind first, then any of that
        kind; None for a deny with no reject option (the call is denied without a choice). ValueError for
        an allow with no allow option."""
        wanted = "allow" if verdict == "allow" else "reject"
        kinds = [option for option in self.options if option["kind"].startswith(wanted)]
        once = [option for option in kinds if option["kind"].endswith("_once")]
        chosen = (once or kinds)[:1]
        if not chosen and wanted == "allow":
            raise ValueError(f"approval {self.id} offers no option that allows the call")
        return chosen[0]["id"] if chosen else None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Approval:
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        return cls(**known)

    def settled(self, state: str, *, choice: str | None = None, by: str | None = None,
                reason: str | None = None, now: float | None = None) -> Approval:
        """This approval settled now as `state`."""
        return replace(self, state=state, choice=choice, answered_by=by, reason=reason,
                       settled_at=time.time() if now is None else now)


class FileApprovals:
    """Approvals in `<home>/queue/state/approvals.json`: every writer holds an exclusive lock on
    `approvals.lock` while it reads, changes and atomically rewrites the file, so of two processes
    answering at once the second sees the first's answer."""

    def __init__(self, home: Home, *, fsync: bool = True):
        self.path = home.state / "approvals.json"
        self._lock_path = home.state / "approvals.lock"
        self.fsync = fsync

    def _read(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.path.read_bytes())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    @contextmanager
    def _locked(self) -> Iterator[dict[str, dict[str, Any]]]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock_path.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            data = self._read()
            before = json.dumps(data, sort_keys=True)
            yield data
            if json.dumps(data, sort_keys=True) != before:
                atomic_write(self.path, json.dumps(data, indent=1).encode(), fsync=self.fsync)

    def request(self, approval: Approval) -> None:
        now = time.time()
        with self._locked() as data:
            for key, entry in list(data.items()):
                if entry.get("state") != PENDING and (entry.get("settled_at") or now) + SETTLED_KEPT_S < now:
                    del data[key]
            data[approval.id] = approval.to_json()

    def get(self, approval_id: str) -> Approval | None:
        entry = self._read().get(approval_id)
        return Approval.from_json(entry) if entry is not None else None

    def pending(self) -> list[Approval]:
        found = [Approval.from_json(entry) for entry in self._read().values() if entry.get("state") == PENDING]
        return sorted(found, key=lambda approval: (approval.created_at, approval.id))

    def settle(self, approval_id: str, state: str, *, choice: str | None = None, by: str | None = None,
               reason: str | None = None) -> tuple[Approval | None, bool]:
        with self._locked() as data:
            entry = data.get(approval_id)
            if entry is None:
                return None, False
            current = Approval.from_json(entry)
            if not current.pending:
                return current, False
            done = current.settled(state, choice=choice, by=by, reason=reason)
            data[approval_id] = done.to_json()
            return done, True


OPERATOR = "operator"
"""The `reason` of an answer given outside the chat (`switchyard approvals`, the dashboard): the waiting
turn then tells the conversation, which saw no answer."""


def operator_answer(store: Any, approval_id: str, verdict: str, by: str) -> tuple[Approval, bool]:
    """Answers a pending approval with `verdict` ("allow" or "deny") for an operator (`by`: "cli", "dashboard"):
    (the approval as stored now, whether this answer settled it). KeyError for an unknown id; ValueError
    for an allow it offers no option for."""
    approval = store.get(approval_id.strip().lower())
    if approval is None:
        raise KeyError(approval_id)
    if not approval.pending:
        return approval, False
    done, won = store.settle(approval.id, ANSWERED, choice=approval.choice_for(verdict), by=by, reason=OPERATOR)
    return (done if done is not None else approval), won


def describe(approval: Approval, now: float | None = None) -> dict[str, Any]:
    """What a listing shows of an approval (CLI, dashboard): id, conversation, title, options, age, expiry."""
    now = time.time() if now is None else now
    return {"id": approval.id, "state": approval.state, "conversation": _conversation(approval.scope),
            "title": approval.title, "detail": approval.detail,
            "options": ", ".join(option["name"] for option in approval.options),
            "age_s": round(now - approval.created_at, 1), "expires_in_s": round(approval.expires_at - now, 1),
            "owner": approval.owner}


def _conversation(scope: str) -> str:
    """How a listing names the conversation of an approval's scope (`<channel>/<profile>/<conversation>`)."""
    parsed = ConversationScope.parse(scope)
    return scope if parsed is None else parsed.path
