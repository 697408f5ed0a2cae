"""What agent turns spend, and where it is counted (the UsageRecords protocol), with the in-memory store.

A turn is one provider call made for a message: its cost in USD when the CLI reports one (claude), its input
and output tokens when the CLI reports them (claude, codex, gemini, ollama), and always one turn and its
seconds. Each turn is added to the per-day totals of its payer's keys — the sender, the conversation, the
channel profile and the provider — in the backend's store (files: orchestrator/storage/files/usage.py; PostgreSQL:
orchestrator/storage/postgres/usage.py); the limits (orchestrator/usage/meter.py) read those totals before a turn
starts.

A turn that starts is counted as running against the same keys until it ends (a reservation): the store checks
the limits and reserves in one step that no other handle — thread, process or host — can interleave, so turns
started at once cannot pass a limit together. A reservation lasts until it is released or until `ttl_s` after
its last renewal; one whose holder is a process of this machine that is gone stops counting at once.
tests/contract/test_usage.py checks the rules written here once on every backend.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from datetime import date
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from gateway.disk.locks import holder_process, pid_alive

if TYPE_CHECKING:
    from gateway.models import IncomingPayload

PAYER_KINDS = ("sender", "conversation", "profile", "provider")
"""What a day's totals are kept by (`switchyard usage --by`, a limit's `per`)."""
MAX_AMOUNT = 1e12
"""More than one turn can cost, use or last: a bigger figure is no amount (and a sum of them never overflows)."""
Invalid = tuple[str, str]
"""A reported figure that is no amount: its field and its raw value as text (JSON), as `usage.invalid` names them."""


def is_amount(value: object, *, whole: bool = False) -> bool:
    """Whether a cost, count or duration can be counted: a finite number from 0 to MAX_AMOUNT (not a bool; with
    `whole`, an int)."""
    if isinstance(value, bool) or not isinstance(value, int if whole else int | float):
        return False
    return 0 <= value <= MAX_AMOUNT  # False for NaN; an int never overflows this comparison


def raw_text(value: object) -> str:
    """A reported value as text for an event: its JSON (NaN, Infinity, -1, "12"), at most 100 characters."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text[:100]


@dataclass(frozen=True)
class Spent:
    """What one turn, or many added up, spent: USD (0 when the CLI reports no cost), tokens in and out (0 when it
    reports none), turns, and seconds of agent time."""

    usd: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    turns: int = 0
    seconds: float = 0.0

    @property
    def tokens(self) -> int:
        """Input and output tokens together (what a `tokens` limit counts)."""
        return self.tokens_in + self.tokens_out

    def __add__(self, other: Spent) -> Spent:
        return Spent(self.usd + other.usd, self.tokens_in + other.tokens_in, self.tokens_out + other.tokens_out,
                     self.turns + other.turns, self.seconds + other.seconds)

    def amount(self, unit: str) -> float:
        """The amount of one limit unit: usd, tokens, turns or agent_sec."""
        return {"usd": self.usd, "tokens": float(self.tokens), "turns": float(self.turns),
                "agent_sec": self.seconds}[unit]

    def counted(self) -> tuple[Spent, list[Invalid]]:
        """This spending with each figure that is no amount (NaN, infinite, negative, too big) as 0, and those
        figures: what every store adds and reads back, so a total is never NaN."""
        invalid = [(each.name, raw_text(getattr(self, each.name))) for each in fields(self)
                   if not is_amount(getattr(self, each.name))]
        return replace(self, **{name: 0 for name, _ in invalid}), invalid


@dataclass(frozen=True)
class TokenUsage:
    """What a CLI's own output said one call used (read from its envelope); None fields: not reported. `invalid`:
    the figures it reported that are no amount (is_amount), each with its field and raw value: not counted."""

    usd: float | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    invalid: tuple[Invalid, ...] = ()

    def spent(self, seconds: float) -> Spent:
        """One turn of `seconds` that used this."""
        return Spent(self.usd or 0.0, self.tokens_in or 0, self.tokens_out or 0, 1, seconds)


@dataclass(frozen=True)
class Payer:
    """Whom a message's turns are counted against: its sender, its conversation and its channel profile."""

    sender: str  # `<channel>/<profile>/<senderId>`
    conversation: str  # `<channel>/<profile>/<conversation>` (runstate.conversation_key)
    profile: str  # the channel profile id (the channel's name when it has none)

    @classmethod
    def of(cls, message: IncomingPayload) -> Payer:
        """The payer of a message."""
        from orchestrator.runs.state import conversation_key  # here: `switchyard --help` imports this module

        sender = message.senderId or message.sender or message.conversation
        return cls(f"{message.channel}/{message.profile}/{sender}", conversation_key(message), message.profile)

    def keys(self, provider: str | None = None) -> dict[str, str]:
        """Kind → key of every total a turn adds to (the provider's only when given)."""
        keys = {"sender": self.sender, "conversation": self.conversation, "profile": self.profile}
        return keys if provider is None else {**keys, "provider": provider}


class Ledger(Protocol):
    """What a limit is checked against: the totals so far and the turns running now."""

    def totals(self, kind: str, key: str, first: date, last: date) -> Spent:
        """What `key` of `kind` spent from day `first` to day `last`, both included (nothing: Spent())."""

    def running(self, kind: str, key: str) -> int:
        """How many turns counted against `key` of `kind` run now (reserved, neither released nor expired)."""


Admit = Callable[[Ledger], None]
"""Checks a turn's limits on a ledger before it starts; raises (LimitReached) to refuse it."""


@runtime_checkable
class UsageRecords(Ledger, Protocol):
    """Per-day totals of what turns spent, by kind (PAYER_KINDS) and key, and the turns running now; shared by
    every process and host of the backend: adds from any number of them at once are all counted, once."""

    def add(self, day: date, keys: Mapping[str, str], spent: Spent) -> None:
        """Adds one turn's spending to the day's total of each (kind, key) in `keys`; a figure that is no amount
        (Spent.counted) adds nothing, and one stored that is none is read back as nothing: a total is never NaN."""

    def table(self, kind: str, first: date, last: date) -> list[tuple[str, Spent]]:
        """Every key of `kind` with spending from `first` to `last`, summed over those days; most USD first, then
        most tokens, then most turns, then by key."""

    def reset(self, kind: str, key: str | None, first: date, last: date) -> int:
        """Forgets what `key` (None: every key) of `kind` spent from `first` to `last`; returns how many day
        totals were forgotten."""

    def reserve(self, keys: Mapping[str, str], admit: Admit, ttl_s: float) -> str:
        """Runs `admit` on the totals and running turns of `keys` while no handle of the backend can reserve for
        any of them, then counts one running turn against each until `release` or `ttl_s` after the last renewal;
        returns the reservation's token. What `admit` raises is raised, and nothing is reserved."""

    def renew(self, token: str, ttl_s: float) -> None:
        """Makes a reservation last `ttl_s` from now (a turn still running)."""

    def release(self, token: str) -> None:
        """Ends a reservation (its turn ended, or never started); one already gone is no error."""


def holder_gone(holder: str) -> bool:
    """Whether a reservation's holder (`<host>:<pid>[:...]`, gateway.disk.locks.process_instance) is a process
    of this machine that no longer exists; of another machine's nothing is known (it expires)."""
    host, pid = holder_process(holder)
    return host == socket.gethostname() and pid is not None and not pid_alive(pid)


def new_token() -> str:
    """A reservation's token."""
    return uuid.uuid4().hex


def ordered(rows: Mapping[str, Spent]) -> list[tuple[str, Spent]]:
    """The rows of a usage table in its order: most USD, most tokens, most turns, then by key."""
    return sorted(rows.items(), key=lambda row: (-row[1].usd, -row[1].tokens, -row[1].turns, row[0]))


class MemoryUsageRecords:
    """UsageRecords in this process (tests; the in-memory backend). `twin` is another handle on the same state,
    as a second host on one database. Its reservations expire by time alone (time.monotonic)."""

    def __init__(self) -> None:
        self._days: dict[tuple[date, str, str], Spent] = {}
        self._running: dict[str, tuple[dict[str, str], float]] = {}  # token → (keys, expiry)
        self._lock = threading.RLock()  # a reservation's `admit` reads totals while holding it

    def twin(self) -> MemoryUsageRecords:
        other = MemoryUsageRecords()
        other._days, other._running, other._lock = self._days, self._running, self._lock
        return other

    def add(self, day: date, keys: Mapping[str, str], spent: Spent) -> None:
        spent, _ = spent.counted()
        with self._lock:
            for kind, key in keys.items():
                self._days[(day, kind, key)] = self._days.get((day, kind, key), Spent()).counted()[0] + spent

    def totals(self, kind: str, key: str, first: date, last: date) -> Spent:
        with self._lock:
            return sum((spent.counted()[0] for (day, k, name), spent in self._days.items()
                        if k == kind and name == key and first <= day <= last), Spent())

    def table(self, kind: str, first: date, last: date) -> list[tuple[str, Spent]]:
        rows: dict[str, Spent] = {}
        with self._lock:
            for (day, k, name), spent in self._days.items():
                if k == kind and first <= day <= last:
                    rows[name] = rows.get(name, Spent()) + spent.counted()[0]
        return ordered(rows)

    def reset(self, kind: str, key: str | None, first: date, last: date) -> int:
        with self._lock:
            gone = [entry for entry in self._days
                    if entry[1] == kind and (key is None or entry[2] == key) and first <= entry[0] <= last]
            for entry in gone:
                del self._days[entry]
            return len(gone)

    def running(self, kind: str, key: str) -> int:
        now = time.monotonic()
        with self._lock:
            return sum(1 for keys, expiry in self._running.values() if expiry > now and keys.get(kind) == key)

    def reserve(self, keys: Mapping[str, str], admit: Admit, ttl_s: float) -> str:
        with self._lock:
            now = time.monotonic()
            for token in [token for token, (_, expiry) in self._running.items() if expiry <= now]:
                del self._running[token]
            admit(self)
            token = new_token()
            self._running[token] = (dict(keys), now + ttl_s)
            return token

    def renew(self, token: str, ttl_s: float) -> None:
        with self._lock:
            if token in self._running:
                self._running[token] = (self._running[token][0], time.monotonic() + ttl_s)

    def release(self, token: str) -> None:
        with self._lock:
            self._running.pop(token, None)
