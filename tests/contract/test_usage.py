"""Per-day usage totals on every backend (orchestrator/usage.py UsageRecords): adds summed over a range of days,
both ends included; kinds kept apart; the table's order; a reset of one key or of every key of a kind, only within
its dates; and adds racing from 8 handles (processes on one home, hosts on one database) each counted once. On
files a second process adds at the same time as this one's threads, and every turn of both is counted. A figure
that is no amount (NaN, infinite, negative), added or found stored, counts as nothing: a total is never NaN."""

from __future__ import annotations

import math
import subprocess
import sys
import threading
import time
from datetime import date, timedelta
from pathlib import Path

import pytest

from orchestrator.usage import Spent
from tests.contract.backends import Backend

DAY = date(2026, 11, 27)
KEYS = {"sender": "telegram/tg/1", "conversation": "telegram/tg/c1", "profile": "tg", "provider": "claude"}
TURN = Spent(usd=0.25, tokens_in=100, tokens_out=20, turns=1, seconds=1.5)  # sums of these are exact floats
HANDLES, TURNS_EACH = 8, 50
REPO = Path(__file__).resolve().parents[2]


def test_adds_are_summed_over_the_days_asked_for(backend: Backend) -> None:
    records = backend.usage()
    for offset in range(3):
        records.add(DAY + timedelta(days=offset), KEYS, TURN)
    records.add(DAY + timedelta(days=1), {"sender": "telegram/tg/1"}, Spent(usd=1.0, turns=1))
    other = backend.usage()
    assert other.totals("sender", "telegram/tg/1", DAY, DAY + timedelta(days=2)) == Spent(1.75, 300, 60, 4, 4.5)
    assert other.totals("sender", "telegram/tg/1", DAY + timedelta(days=1), DAY + timedelta(days=1)) == \
        Spent(1.25, 100, 20, 2, 1.5)
    assert other.totals("profile", "tg", DAY + timedelta(days=2), DAY + timedelta(days=9)) == TURN
    assert other.totals("sender", "telegram/tg/1", DAY - timedelta(days=9), DAY - timedelta(days=1)) == Spent()
    assert other.totals("sender", "telegram/tg/2", DAY, DAY + timedelta(days=2)) == Spent()


def test_kinds_are_kept_apart(backend: Backend) -> None:
    records = backend.usage()
    records.add(DAY, {"sender": "x", "provider": "claude"}, TURN)
    records.add(DAY, {"conversation": "x"}, Spent(turns=1))
    assert records.totals("sender", "x", DAY, DAY) == TURN
    assert records.totals("conversation", "x", DAY, DAY) == Spent(turns=1)
    assert records.totals("profile", "x", DAY, DAY) == Spent()
    assert records.table("provider", DAY, DAY) == [("claude", TURN)]
    assert records.table("profile", DAY, DAY) == []


def test_the_table_lists_most_usd_then_tokens_then_turns_then_by_key(backend: Backend) -> None:
    records = backend.usage()
    spent = {"d": Spent(usd=2.0, turns=1), "c": Spent(tokens_in=50, turns=1), "b": Spent(tokens_out=50, turns=3),
             "a": Spent(turns=2), "e": Spent(turns=2)}
    for key, each in spent.items():
        records.add(DAY, {"sender": key}, each)
    records.add(DAY + timedelta(days=1), {"sender": "a"}, Spent(usd=0.5, turns=1))
    records.add(DAY + timedelta(days=5), {"sender": "z"}, Spent(usd=9.0, turns=1))
    assert backend.usage().table("sender", DAY, DAY + timedelta(days=1)) == [
        ("d", spent["d"]), ("a", Spent(usd=0.5, turns=3)), ("b", spent["b"]), ("c", spent["c"]), ("e", spent["e"])]


def test_a_reset_forgets_one_key_or_all_keys_of_a_kind_within_its_dates(backend: Backend) -> None:
    records = backend.usage()
    for offset in range(4):
        records.add(DAY + timedelta(days=offset), KEYS, TURN)
        records.add(DAY + timedelta(days=offset), {"sender": "other"}, TURN)
    first, last = DAY + timedelta(days=1), DAY + timedelta(days=2)
    assert records.reset("sender", "telegram/tg/1", first, last) == 2
    reader = backend.usage()
    assert reader.totals("sender", "telegram/tg/1", DAY, DAY + timedelta(days=3)) == TURN + TURN
    assert reader.totals("sender", "other", DAY, DAY + timedelta(days=3)) == Spent(1.0, 400, 80, 4, 6.0)
    assert reader.totals("conversation", "telegram/tg/c1", first, last) == TURN + TURN, "other kinds are kept"
    assert reader.reset("sender", "telegram/tg/1", first, last) == 0
    assert reader.reset("sender", None, DAY + timedelta(days=2), DAY + timedelta(days=3)) == 3
    assert records.table("sender", DAY, DAY + timedelta(days=3)) == [
        ("other", TURN + TURN), ("telegram/tg/1", TURN)]
    assert records.totals("provider", "claude", DAY, DAY + timedelta(days=3)) == Spent(1.0, 400, 80, 4, 6.0)


def add_from_threads(handles: list[object], turns: int) -> tuple[float, float]:
    """Each handle adds `turns` turns on a thread of its own, all released at once; (first start, last end)."""
    gate = threading.Barrier(len(handles))
    spans: list[float] = []

    def run(records: object) -> None:
        gate.wait()
        spans.append(time.time())
        for _ in range(turns):
            records.add(DAY, KEYS, TURN)  # type: ignore[attr-defined]
        spans.append(time.time())

    threads = [threading.Thread(target=run, args=(records,)) for records in handles]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    return min(spans), max(spans)


def expected(turns: int) -> Spent:
    return Spent(0.25 * turns, 100 * turns, 20 * turns, turns, 1.5 * turns)


def test_racing_adds_from_many_handles_are_each_counted_once(backend: Backend) -> None:
    add_from_threads([backend.usage() for _ in range(HANDLES)], TURNS_EACH)
    reader = backend.usage()
    for kind, key in KEYS.items():
        assert reader.totals(kind, key, DAY, DAY) == expected(HANDLES * TURNS_EACH), kind


@pytest.mark.timeout(60)
def test_a_second_process_adding_at_the_same_time_is_counted_too(backend: Backend) -> None:
    if backend.name != "files":
        pytest.skip("processes on one home are the file backend's case (hosts on one database: the race above)")
    home = backend.home  # type: ignore[attr-defined]
    stop = home.root / "stop-adding"
    with subprocess.Popen([sys.executable, "-m", "tests.contract.usageproc", str(home.root), str(stop)],
                          cwd=REPO, stdout=subprocess.PIPE, text=True) as child:
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "started"  # it is adding now, and goes on until told
            add_from_threads([backend.usage() for _ in range(HANDLES)], TURNS_EACH)
            stop.touch()
            turns_there = int(child.stdout.readline().split()[1])
            assert child.wait(30) == 0
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    total = expected(HANDLES * TURNS_EACH + turns_there)
    for kind, key in KEYS.items():
        assert backend.usage().totals(kind, key, DAY, DAY) == total, kind


NOT_AMOUNTS = [math.nan, math.inf, -math.inf, -0.25]


@pytest.mark.parametrize("bad", NOT_AMOUNTS, ids=str)
def test_a_figure_that_is_no_amount_adds_nothing(backend: Backend, bad: float) -> None:
    records = backend.usage()
    records.add(DAY, KEYS, TURN)
    records.add(DAY, KEYS, Spent(usd=bad, tokens_in=100, tokens_out=-20, turns=1, seconds=bad))
    records.add(DAY, KEYS, TURN)
    reader = backend.usage()
    for kind, key in KEYS.items():
        assert reader.totals(kind, key, DAY, DAY) == Spent(0.5, 300, 40, 3, 3.0), kind
    assert reader.table("sender", DAY, DAY) == [(KEYS["sender"], Spent(0.5, 300, 40, 3, 3.0))]


@pytest.mark.parametrize("bad", NOT_AMOUNTS, ids=str)
def test_a_figure_found_stored_that_is_no_amount_is_read_as_nothing(backend: Backend, bad: float) -> None:
    key = KEYS["sender"]
    backend.plant_usage(DAY, "sender", key, [bad, 100, -20, 1, bad])
    reader = backend.usage()
    assert reader.totals("sender", key, DAY, DAY) == Spent(0.0, 100, 0, 1, 0.0)
    reader.add(DAY, KEYS, TURN)  # a later turn still counts, and the total stays a number
    assert backend.usage().totals("sender", key, DAY, DAY) == Spent(0.25, 200, 20, 2, 1.5)
    assert backend.usage().table("sender", DAY, DAY) == [(key, Spent(0.25, 200, 20, 2, 1.5))]
