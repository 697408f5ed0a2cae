"""Spending limits: checked before a turn starts, and each turn's spending added to its payer's day totals.

The totals live in the backend's usage store (orchestrator/usage/records.py UsageRecords); the limits are `usage.limits`
in settings.yaml (gateway/config/usage.py). A limit is reached once what was used in its window is at least the
limit: the turn that crosses it finishes, the next one is not started. Days and months begin at midnight in
`usage.timezone`.

The turns running now count too: a turn reserves before it starts (the check and the reservation one step in the
store, against every other handle), so turns started at once pass a limit by one turn at most, as one after
another do. For `turns` each running turn counts one; for usd, tokens and agent_sec, whose amount is known only
once the turn ends, each counts the window's average per turn so far (nothing while no turn has ended in it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any, TypeVar

from gateway.api import PermanentError
from gateway.config.usage import LimitRule, UsageSettings
from gateway.telemetry.events import EventLog
from orchestrator.usage.records import PAYER_KINDS, Invalid, Ledger, Payer, Spent, UsageRecords

log = logging.getLogger("switchyard.usage")

T = TypeVar("T")
RESERVATION_TTL_SEC = 60.0
"""How long a running turn's reservation counts after its last renewal (every third of it while the turn runs): a
holder that died unseen (on another host) is counted that long at most."""
WINDOW_WORDS = {"day": "daily", "month": "monthly"}
PER_WORDS = {"sender": "per sender", "conversation": "for this conversation", "profile": "for this channel",
             "provider": "of the agent {key}"}


@dataclass(frozen=True)
class Standing:
    """How one payer stands against one limit: what was used in the window, the limit, when the window ends."""

    kind: str  # sender | conversation | profile | provider
    key: str
    window: str  # day | month
    unit: str  # usd | tokens | turns | agent_sec
    used: float  # with the turns running now (`running`), counted as the module's docstring says
    limit: float
    resets_at: datetime
    running: int = 0

    @property
    def reached(self) -> bool:
        return self.used >= self.limit

    def describe(self) -> str:
        """`daily limit of $2.00 per sender: $2.13 used` (`, counting 1 turn still running`)."""
        per = PER_WORDS[self.kind].format(key=self.key)
        still = f", counting {amount('turns', self.running)} still running" if self.running else ""
        return (f"{WINDOW_WORDS[self.window]} limit of {amount(self.unit, self.limit)} {per}: "
                f"{amount(self.unit, self.used)} used{still}")

    def resets(self, now: datetime) -> str:
        """`it resets at 00:00 UTC on 2026-11-29 (in 3 h 12 min)`."""
        left = max(self.resets_at - now, timedelta(0))
        hours, rest = divmod(int(left.total_seconds()) // 60, 60)
        wait = f"{hours} h {rest} min" if hours else f"{rest} min"
        return f"it resets at {self.resets_at:%H:%M} {self.resets_at.tzname()} on {self.resets_at:%Y-%m-%d} (in {wait})"


class LimitReached(PermanentError):
    """A spending limit is reached: the turn was not started. `standing` says which limit; the reply says which,
    how much was used and when it resets."""

    def __init__(self, standing: Standing, now: datetime):
        self.standing = standing
        text = f"You have reached the {standing.describe()}; {standing.resets(now)}."
        super().__init__(text, reply=text)


def amount(unit: str, value: float) -> str:
    """An amount of a limit unit as people read it: $2.13, 12,345 tokens, 100 turns, 1 h 02 min of agent time."""
    if unit == "usd":
        return f"${value:,.2f}"
    if unit == "agent_sec":
        minutes = int(value) // 60
        spoken = f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min {int(value) % 60} s"
        return f"{spoken} of agent time"
    return f"{int(value):,} {unit if int(value) != 1 else unit.removesuffix('s')}"


class UsageMeter:
    """Checks a payer's limits before a turn and adds each turn's spending to the day's totals.

    `records` None (a backend without a usage store): nothing is counted and nothing is limited. A store that
    fails while recording is logged, not raised: the turn has run, and running it again would cost twice."""

    def __init__(self, records: UsageRecords | None, settings: UsageSettings, events: EventLog | None = None,
                 clock: Callable[[], datetime] | None = None, ttl_sec: float = RESERVATION_TTL_SEC,
                 roles_of: Callable[[str], tuple[str, ...]] | None = None):
        """`roles_of`: the roles of a sender key (`<channel>/<profile>/<senderId>`), for limits with `role:`."""
        self.records = records
        self._roles_of = roles_of
        self.settings = settings
        self._events = events
        self._clock = clock or (lambda: datetime.now(self.settings.zone()))
        self._ttl = ttl_sec

    def reconfigure(self, settings: UsageSettings) -> None:
        """Checks the limits (and days in the time zone) of settings.yaml reloaded while running."""
        self.settings = settings

    @property
    def limiting(self) -> bool:
        """Whether any limit can be reached (a store and at least one limit): else `check` has nothing to do."""
        return self.records is not None and bool(self.settings.limits)

    def now(self) -> datetime:
        """Now, in the usage time zone."""
        return self._clock().astimezone(self.settings.zone())

    def standings(self, payer: Payer, provider: str | None = None, *,
                  kinds: tuple[str, ...] = PAYER_KINDS) -> list[Standing]:
        """How `payer` (and `provider`, when given) stands against every limit that applies to it, in the order
        of the settings, by what its ended turns used."""
        if self.records is None:
            return []
        return self._standings(self.records, _keys(payer, provider, kinds), running=False)

    def _standings(self, ledger: Ledger, keys: dict[str, str], *, running: bool) -> list[Standing]:
        now = self.now()
        used: dict[tuple[str, str], Spent] = {}
        counts: dict[str, int] = {}
        found = []
        roles = self._roles_of(keys["sender"]) if self._roles_of is not None and "sender" in keys else ()
        for (kind, window, unit), limit in _applying(self.settings.limits, keys, roles).items():
            first, resets_at = window_of(window, now)
            if (kind, window) not in used:
                used[(kind, window)] = ledger.totals(kind, keys[kind], first, now.date())
            if running and kind not in counts:
                counts[kind] = ledger.running(kind, keys[kind])
            count = counts.get(kind, 0)
            found.append(Standing(kind, keys[kind], window, unit, _with_running(used[(kind, window)], unit, count),
                                  limit, resets_at, count))
        return found

    def check(self, payer: Payer, provider: str | None = None, *, kinds: tuple[str, ...] = PAYER_KINDS) -> None:
        """Raises LimitReached for the first limit reached, counting the turns running now (with an event), else
        returns; it reserves nothing (a turn about to start reserves: `reserve`)."""
        records = self.records
        if records is not None:
            keys = _keys(payer, provider, kinds)
            self._refusing(lambda: self._admit(records, keys))

    def reserve(self, payer: Payer, provider: str | None = None, *, kinds: tuple[str, ...] = PAYER_KINDS) -> str | None:
        """Checks as `check` does and, in the same step on every handle of the store, counts one more turn running
        against the payer's keys: the reservation's token, for `release` (None: no limit applies, nothing is
        reserved). Raises LimitReached (with an event)."""
        records = self.records
        if records is None or not self.settings.limits:
            return None
        keys = _keys(payer, provider, kinds)
        return self._refusing(lambda: records.reserve(keys, lambda ledger: self._admit(ledger, keys), self._ttl))

    def _admit(self, ledger: Ledger, keys: dict[str, str]) -> None:
        for standing in self._standings(ledger, keys, running=True):
            if standing.reached:
                raise LimitReached(standing, self.now())

    def _refusing(self, step: Callable[[], T]) -> T:
        """`step`'s result; a LimitReached it raises gets its event `usage.limit_reached`."""
        try:
            return step()
        except LimitReached as exc:
            standing = exc.standing
            if self._events is not None:
                self._events.emit("usage.limit_reached", kind=standing.kind, key=standing.key,
                                  window=standing.window, unit=standing.unit, used=standing.used,
                                  limit=standing.limit, running=standing.running,
                                  resets_at=standing.resets_at.isoformat())
            raise

    def renew(self, token: str) -> None:
        """Makes a running turn's reservation last another TTL; a store that fails is logged (it expires)."""
        if self.records is not None:
            try:
                self.records.renew(token, self._ttl)
            except Exception as exc:  # (OSError, a database error)
                log.warning("could not renew the reservation of a running turn: %s", exc)

    def release(self, token: str) -> None:
        """Ends a turn's reservation; a store that fails is logged: the reservation expires after its TTL."""
        if self.records is not None:
            try:
                self.records.release(token)
            except Exception as exc:  # (OSError, a database error)
                log.warning("could not release the reservation of a turn (it expires in %gs): %s", self._ttl, exc)

    @asynccontextmanager
    async def turn(self, payer: Payer, provider: str | None = None, *, kinds: tuple[str, ...] = PAYER_KINDS,
                   reserve: bool = True) -> AsyncIterator[None]:
        """A turn of `payer` while the block runs: its limits are checked first, counting the turns running now
        (LimitReached: the block does not run), and with `reserve` it counts as running until the block ends,
        however it ends (its spending, recorded in the block, then counts instead)."""
        if not self.limiting:
            yield
            return
        if not reserve:
            await asyncio.to_thread(self.check, payer, provider, kinds=kinds)
            yield
            return
        token = await _taken(asyncio.to_thread(self.reserve, payer, provider, kinds=kinds), self.release)
        if token is None:
            yield
            return
        renewing = asyncio.create_task(self._renewing(token), name="usage-reservation-renewal")
        try:
            yield
        finally:
            renewing.cancel()
            await asyncio.to_thread(self.release, token)  # runs to its end even if this task is cancelled again

    async def _renewing(self, token: str) -> None:
        while True:
            await asyncio.sleep(self._ttl / 3)
            await asyncio.to_thread(self.renew, token)

    def record(self, payer: Payer, provider: str, spent: Spent, *, run_id: str | None = None,
               invalid: Sequence[Invalid] = ()) -> None:
        """Adds one turn's spending to today's totals of the payer's keys and the provider, with an event. A figure
        that is no amount (NaN, infinite, negative), reported (`invalid`) or in `spent`, is not counted: an event
        `usage.invalid` names it with its raw value."""
        spent, found = spent.counted()
        for field, raw in [*invalid, *found]:
            log.warning("%s reported a %s that is no amount (%s): not counted", provider, field, raw)
            if self._events is not None:
                self._events.emit("usage.invalid", job_id=run_id, provider=provider, profile=payer.profile,
                                  field=field, raw=raw)
        if self.records is not None:
            try:
                self.records.add(self.now().date(), payer.keys(provider), spent)
            except Exception as exc:  # (OSError, a database error)
                log.warning("could not count the usage of a turn of %s: %s", provider, exc)
        if self._events is not None:
            fields: dict[str, Any] = {"provider": provider, "profile": payer.profile, "usd": round(spent.usd, 6),
                                      "tokens_in": spent.tokens_in, "tokens_out": spent.tokens_out,
                                      "seconds": round(spent.seconds, 3)}
            self._events.emit("usage.recorded", job_id=run_id, **fields)

    def report(self, payer: Payer) -> str:
        """What `/usage` tells a sender: their own spending today and this month, and each limit that applies to
        them; of a limit shared with others (their conversation, their channel) only whether it is reached, never
        what the others spent."""
        if self.records is None:
            return "Usage is not counted here (this backend keeps no usage)."
        now = self.now()
        month_first, _ = window_of("month", now)
        lines = [f"Your usage today: {spending(self.records.totals('sender', payer.sender, now.date(), now.date()))}",
                 f"This month: {spending(self.records.totals('sender', payer.sender, month_first, now.date()))}"]
        standings = self.standings(payer, kinds=("sender", "conversation", "profile"))
        for standing in standings:
            if standing.kind == "sender":
                line = standing.describe()
            else:
                per = PER_WORDS[standing.kind].format(key=standing.key)
                line = (f"{WINDOW_WORDS[standing.window]} limit of {amount(standing.unit, standing.limit)} {per}: "
                        + ("reached" if standing.reached else "not reached"))
            lines.append(f"- {line}" + (f"; {standing.resets(now)}" if standing.reached else ""))
        if standings:
            lines.insert(2, "Limits:")
        else:
            lines.append("No limits apply to you.")
        return "\n".join(lines)


def spending(spent: Spent) -> str:
    """`$0.42, 12,345 tokens, 7 turns, 3 min 12 s of agent time` (the cost only when a CLI reported one)."""
    parts = [amount("usd", spent.usd)] if spent.usd else []
    parts += [amount("tokens", spent.tokens), amount("turns", spent.turns), amount("agent_sec", spent.seconds)]
    return ", ".join(parts)


def window_of(window: str, now: datetime) -> tuple[date, datetime]:
    """The first day of the `day` or `month` window `now` is in, and the moment the next one begins."""
    today = now.date()
    if window == "day":
        first, following = today, today + timedelta(days=1)
    else:
        first = today.replace(day=1)
        following = (first + timedelta(days=32)).replace(day=1)
    return first, datetime.combine(following, time(), tzinfo=now.tzinfo)


def _applying(rules: list[LimitRule], keys: dict[str, str],
              roles: tuple[str, ...] = ()) -> dict[tuple[str, str, str], float]:
    """(kind, window, unit) → the limit that applies to these keys: a rule matching the key replaces one of the
    sender's role, which replaces one without either; of two alike, the later one in the settings wins."""
    general: dict[tuple[str, str, str], float] = {}
    by_role: dict[tuple[str, str, str], float] = {}
    specific: dict[tuple[str, str, str], float] = {}
    for rule in rules:
        key = keys.get(rule.per)
        if key is None or (rule.match is not None and rule.match != key):
            continue
        if rule.role is not None and rule.role not in roles:
            continue
        chosen = specific if rule.match is not None else by_role if rule.role is not None else general
        for window in ("day", "month"):
            amounts = getattr(rule, window)
            for unit, limit in amounts.units() if amounts is not None else ():
                chosen[(rule.per, window, unit)] = limit
    return {**general, **by_role, **specific}


def _keys(payer: Payer, provider: str | None, kinds: tuple[str, ...]) -> dict[str, str]:
    return {kind: key for kind, key in payer.keys(provider).items() if kind in kinds}


def _with_running(spent: Spent, unit: str, running: int) -> float:
    """What a window used, with `running` turns still running: each one turn, and of the other units the window's
    average per turn so far (nothing while no turn has ended in it: a turn's cost is known only once it ends)."""
    used = spent.amount(unit)
    if unit == "turns":
        return used + running
    return used + (used / spent.turns * running if spent.turns else 0.0)


async def _taken(reserving: Awaitable[str | None], release: Callable[[str], None]) -> str | None:
    """The token `reserving` gives; when the waiting task is cancelled first, the reservation it still makes is
    released as soon as it is made, so none is left counting."""
    task = asyncio.ensure_future(reserving)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        loop = asyncio.get_running_loop()

        def made(done: asyncio.Future[str | None]) -> None:
            if not done.cancelled() and done.exception() is None and (token := done.result()) is not None:
                loop.run_in_executor(None, release, token)

        task.add_done_callback(made)
        raise
