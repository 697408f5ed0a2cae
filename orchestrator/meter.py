"""Spending limits: checked before a turn starts, and each turn's spending added to its payer's day totals.

The totals live in the backend's usage store (orchestrator/usage.py UsageRecords); the limits are `usage.limits`
in settings.yaml (gateway/usagesettings.py). A limit is reached once what was used in its window is at least the
limit: the turn that crosses it finishes, the next one is not started. Days and months begin at midnight in
`usage.timezone`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any

from gateway.api import PermanentError
from gateway.events import EventLog
from gateway.usagesettings import LimitRule, UsageSettings
from orchestrator.usage import Payer, Spent, UsageRecords

log = logging.getLogger("switchyard.usage")

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
    used: float
    limit: float
    resets_at: datetime

    @property
    def reached(self) -> bool:
        return self.used >= self.limit

    def describe(self) -> str:
        """`daily limit of $2.00 per sender: $2.13 used`."""
        per = PER_WORDS[self.kind].format(key=self.key)
        return (f"{WINDOW_WORDS[self.window]} limit of {amount(self.unit, self.limit)} {per}: "
                f"{amount(self.unit, self.used)} used")

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
                 clock: Callable[[], datetime] | None = None):
        self.records = records
        self.settings = settings
        self._events = events
        self._clock = clock or (lambda: datetime.now(self.settings.zone()))

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
                  kinds: tuple[str, ...] = ("sender", "conversation", "profile", "provider")) -> list[Standing]:
        """How `payer` (and `provider`, when given) stands against every limit that applies to it, in the order
        of the settings."""
        if self.records is None:
            return []
        now = self.now()
        keys = {kind: key for kind, key in payer.keys(provider).items() if kind in kinds}
        used: dict[tuple[str, str], Spent] = {}
        found = []
        for (kind, window, unit), limit in _applying(self.settings.limits, keys).items():
            first, resets_at = window_of(window, now)
            if (kind, window) not in used:
                used[(kind, window)] = self.records.totals(kind, keys[kind], first, now.date())
            found.append(Standing(kind, keys[kind], window, unit, used[(kind, window)].amount(unit), limit, resets_at))
        return found

    def check(self, payer: Payer, provider: str | None = None, *,
              kinds: tuple[str, ...] = ("sender", "conversation", "profile", "provider")) -> None:
        """Raises LimitReached for the first limit reached (with an event), else returns: the turn may start."""
        for standing in self.standings(payer, provider, kinds=kinds):
            if standing.reached:
                if self._events is not None:
                    self._events.emit("usage.limit_reached", kind=standing.kind, key=standing.key,
                                      window=standing.window, unit=standing.unit, used=standing.used,
                                      limit=standing.limit, resets_at=standing.resets_at.isoformat())
                raise LimitReached(standing, self.now())

    def record(self, payer: Payer, provider: str, spent: Spent, *, run_id: str | None = None) -> None:
        """Adds one turn's spending to today's totals of the payer's keys and the provider, with an event."""
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


def _applying(rules: list[LimitRule], keys: dict[str, str]) -> dict[tuple[str, str, str], float]:
    """(kind, window, unit) → the limit that applies to these keys: a rule matching the key replaces one without
    `match`; of two alike, the later one in the settings wins."""
    general: dict[tuple[str, str, str], float] = {}
    specific: dict[tuple[str, str, str], float] = {}
    for rule in rules:
        key = keys.get(rule.per)
        if key is None or (rule.match is not None and rule.match != key):
            continue
        chosen = general if rule.match is None else specific
        for window in ("day", "month"):
            amounts = getattr(rule, window)
            for unit, limit in amounts.units() if amounts is not None else ():
                chosen[(rule.per, window, unit)] = limit
    return {**general, **specific}
