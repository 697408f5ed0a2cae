"""Where each schedule's occurrences are claimed and their outcome kept (the ScheduleRecords protocol), and the
in-memory implementation; the file one is orchestrator/storage/files/schedules.py, PostgreSQL's
orchestrator/storage/postgres/schedules.py.
tests/contract/test_schedules.py checks the rules written here once on all three.

An occurrence is claimed once: `claim` is true for exactly one caller per (schedule, occurrence), whichever
process or host it runs in (a file created only if absent; a row inserted ON CONFLICT DO NOTHING). The claimer
then enqueues the occurrence's message and `finish`es it; a claim left unfinished by a holder that died is
taken over (`take_over`, a compare-and-set on the holder) and its message enqueued again under the same
messageId, which the queue's answered index makes a duplicate if the first copy did get in.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Protocol, runtime_checkable

KEPT = 50
"""The newest occurrences kept per schedule (older ones are forgotten: only the newest matters for what is due)."""


@dataclass(frozen=True)
class Fire:
    """One claimed occurrence of a schedule: who claimed it and when, and how it ended (None: not yet)."""

    schedule: str
    occurrence: datetime
    holder: str
    claimed_at: datetime
    outcome: str | None = None  # fired | skipped | failed
    detail: str | None = None
    message_id: str | None = None
    finished_at: datetime | None = None


@runtime_checkable
class ScheduleRecords(Protocol):
    """Each schedule's first-seen time and its claimed occurrences."""

    def since(self, schedule: str, now: datetime) -> datetime:
        """When the schedule was first seen (recorded as `now` by the first caller): occurrences before it are
        not due."""

    def claim(self, schedule: str, occurrence: datetime, holder: str, now: datetime) -> bool:
        """Claims one occurrence for `holder`; True for exactly one caller per (schedule, occurrence), ever."""

    def take_over(self, schedule: str, occurrence: datetime, holder: str, new_holder: str, now: datetime) -> bool:
        """Moves an unfinished claim from `holder` to `new_holder`; False when it finished or moved already."""

    def finish(self, schedule: str, occurrence: datetime, outcome: str, *, detail: str | None = None,
               message_id: str | None = None, now: datetime) -> None:
        """Records how a claimed occurrence ended."""

    def latest(self, schedule: str, limit: int = 1) -> list[Fire]:
        """The schedule's newest claimed occurrences, newest first."""

    def unfinished(self, schedule: str) -> list[Fire]:
        """Claimed occurrences without an outcome, oldest first."""


class MemoryScheduleRecords:
    """ScheduleRecords in this process (tests; the in-memory backend). `twin` is another handle on the same
    state, as a second host on one database."""

    def __init__(self) -> None:
        self._since: dict[str, datetime] = {}
        self._fires: dict[str, dict[datetime, Fire]] = {}
        self._lock = threading.Lock()

    def twin(self) -> MemoryScheduleRecords:
        other = MemoryScheduleRecords()
        other._since, other._fires, other._lock = self._since, self._fires, self._lock
        return other

    def since(self, schedule: str, now: datetime) -> datetime:
        with self._lock:
            return self._since.setdefault(schedule, now)

    def claim(self, schedule: str, occurrence: datetime, holder: str, now: datetime) -> bool:
        with self._lock:
            fires = self._fires.setdefault(schedule, {})
            if occurrence in fires:
                return False
            fires[occurrence] = Fire(schedule, occurrence, holder, now)
            for old in sorted(fires)[:-KEPT]:
                del fires[old]
            return True

    def take_over(self, schedule: str, occurrence: datetime, holder: str, new_holder: str, now: datetime) -> bool:
        with self._lock:
            fire = self._fires.get(schedule, {}).get(occurrence)
            if fire is None or fire.outcome is not None or fire.holder != holder:
                return False
            self._fires[schedule][occurrence] = replace(fire, holder=new_holder, claimed_at=now)
            return True

    def finish(self, schedule: str, occurrence: datetime, outcome: str, *, detail: str | None = None,
               message_id: str | None = None, now: datetime) -> None:
        with self._lock:
            fire = self._fires.get(schedule, {}).get(occurrence)
            if fire is not None:
                self._fires[schedule][occurrence] = replace(fire, outcome=outcome, detail=detail,
                                                            message_id=message_id, finished_at=now)

    def latest(self, schedule: str, limit: int = 1) -> list[Fire]:
        with self._lock:
            fires = self._fires.get(schedule, {})
            return [fires[moment] for moment in sorted(fires, reverse=True)[:limit]]

    def unfinished(self, schedule: str) -> list[Fire]:
        with self._lock:
            fires = self._fires.get(schedule, {})
            return [fires[moment] for moment in sorted(fires) if fires[moment].outcome is None]
