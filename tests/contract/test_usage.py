"""Per-day usage totals on every backend (orchestrator/usage/records.py UsageRecords): adds summed over a range of days,
both ends included; kinds kept apart; the table's order; a reset of one key or of every key of a kind, only within
its dates; and adds racing from 8 handles (processes on one home, hosts on one database) each counted once. On
files a second process adds at the same time as this one's threads, and every turn of both is counted. A figure
that is no amount (NaN, infinite, negative), added or found stored, counts as nothing: a total is never NaN.

The turns running now (reservations): counted on every handle until released; checked with the totals in one
step, a refused one reserving nothing; six turns at once of one sender, conversation, profile or provider, on two
handles (two hosts on one database, two processes on one home), start exactly as many as `turns: 2` lets; one a
host that died never renewed stops counting after its TTL, one of a process killed on this machine at once; a turn
that never starts, or is cancelled, releases its reservation."""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import date, timedelta
from pathlib import Path

import pytest

from gateway.config.usage import UsageSettings
from gateway.home import Home
from gateway.settings import ProviderSettings
from orchestrator.agents.clis.runner import ProviderRefused
from orchestrator.agents.providers import ProviderRunner
from orchestrator.agents.request import TurnRequest
from orchestrator.usage.meter import LimitReached, UsageMeter
from orchestrator.usage.records import Ledger, Payer, Spent, UsageRecords
from tests.contract.backends import Backend
from tests.fakes.stores import file_sessions

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
    with subprocess.Popen([sys.executable, "-m", "tests.contract.usageproc", "add", str(home.root), str(stop)],
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


PAYERS = {  # six turns at once of one payer of each kind, each in a conversation of its own where it can be
    "sender": [Payer("console/console/ada", f"console/console/c{n}", "console") for n in range(6)],
    "conversation": [Payer(f"console/console/s{n}", "console/console/c1", "console") for n in range(6)],
    "profile": [Payer(f"tg/tg/s{n}", f"tg/tg/c{n}", "tg") for n in range(6)],
    "provider": [Payer(f"p{n}/p{n}/s{n}", f"p{n}/p{n}/c{n}", f"p{n}") for n in range(6)],
}


def _meter(records: UsageRecords, per: str, limit: float = 2, unit: str = "turns") -> UsageMeter:
    settings = UsageSettings.model_validate({"limits": [{"per": per, "day": {unit: limit}}]})
    return UsageMeter(records, settings)


async def turns_at_once(meters: list[UsageMeter], payers: list[Payer], cwd: Path,
                        spent: Spent | None = None) -> tuple[int, int]:
    """One turn of each payer at once, through a ProviderRunner per meter in turn (hosts, or processes, on one
    store); each turn that starts waits until every other one started or was refused. (started, refused)."""
    started: list[int] = []
    refused: list[int] = []
    everyone = asyncio.Event()

    def settled() -> None:
        if len(started) + len(refused) == len(payers):
            everyone.set()

    async def agent(prompt: str, request: dict[str, object]) -> str:
        started.append(1)
        settled()
        await asyncio.wait_for(everyone.wait(), 30)
        return "answered"

    runners = []
    for meter in meters:
        runner = ProviderRunner(Home(cwd / "home"), {}, {"agent": agent}, sessions=file_sessions(Home(cwd / "home")),
                                meter=meter)
        runners.append(runner)

    async def turn(number: int) -> None:
        try:
            await runners[number % len(runners)].run("agent", TurnRequest("hi", cwd, payer=payers[number]))
        except LimitReached:
            refused.append(1)
            settled()

    await asyncio.gather(*(turn(number) for number in range(len(payers))))
    return len(started), len(refused)


@pytest.mark.parametrize("per", sorted(PAYERS))
async def test_six_turns_at_once_start_only_as_many_as_the_limit_on_two_hosts(
        backend: Backend, tmp_path: Path, per: str) -> None:
    meters = [_meter(backend.usage(holder=f"host-{name}:1:1"), per) for name in "ab"]  # two hosts (processes)
    assert await turns_at_once(meters, PAYERS[per], tmp_path) == (2, 4)
    today = meters[0].now().date()
    payer = PAYERS[per][0]
    assert backend.usage().totals(per, payer.keys("agent")[per], today, today).turns == 2
    assert await turns_at_once(meters, PAYERS[per], tmp_path) == (0, 6)  # the two that ran are used now


def admit_all(ledger: Ledger) -> None:
    """Lets every turn start."""


def test_a_reservation_counts_as_running_on_every_handle_until_it_is_released(backend: Backend) -> None:
    first, second = backend.usage(), backend.usage()
    one = first.reserve({"sender": "s", "provider": "claude"}, admit_all, 60)
    two = second.reserve({"sender": "s"}, admit_all, 60)
    assert (second.running("sender", "s"), second.running("provider", "claude")) == (2, 1)
    assert (first.running("sender", "t"), first.running("conversation", "s")) == (0, 0)
    first.release(one)
    assert (second.running("sender", "s"), second.running("provider", "claude")) == (1, 0)
    second.release(two)
    second.release(two)  # gone already: no error
    assert first.running("sender", "s") == 0


def test_a_reservation_is_checked_against_the_totals_and_the_running_turns_and_refused_reserves_nothing(
        backend: Backend) -> None:
    records = backend.usage()
    records.add(DAY, KEYS, TURN)
    records.reserve(KEYS, admit_all, 60)
    seen: list[tuple[int, Spent]] = []

    def refuse(ledger: Ledger) -> None:
        seen.append((ledger.running("sender", KEYS["sender"]), ledger.totals("sender", KEYS["sender"], DAY, DAY)))
        raise LookupError("over the limit")

    with pytest.raises(LookupError):
        backend.usage().reserve(KEYS, refuse, 60)
    assert seen == [(1, TURN)]
    assert records.running("sender", KEYS["sender"]) == 1


def _until(condition: Callable[[], bool], seconds: float = 10.0) -> bool:
    """Whether `condition` holds within `seconds`."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_reservation_a_host_that_died_never_renewed_stops_counting_after_its_ttl(backend: Backend) -> None:
    gone = backend.usage(holder="a-host-that-died:4242:1")  # another machine: nothing known of its processes
    gone.reserve({"sender": "s"}, admit_all, 0.4)
    records = backend.usage()
    kept = records.reserve({"sender": "s"}, admit_all, 0.4)
    records.renew(kept, 60)  # its turn still runs
    assert records.running("sender", "s") == 2
    assert _until(lambda: records.running("sender", "s") == 1)  # the dead host's: its 0.4 s have passed
    assert backend.usage().running("sender", "s") == 1, "the renewed one still counts"
    records.release(kept)
    assert records.running("sender", "s") == 0


@pytest.mark.timeout(60)
def test_a_reservation_of_a_process_killed_on_this_machine_stops_counting_at_once(backend: Backend) -> None:
    if backend.name == "memory":
        pytest.skip("the in-memory backend has no other process: its reservations end by their TTL (above)")
    where = str(backend.home.root) if backend.name == "files" else backend.dsn  # type: ignore[attr-defined]
    records = backend.usage()
    with subprocess.Popen([sys.executable, "-m", "tests.contract.usageproc", "reserve", backend.name, where],
                          cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as child:
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "reserved"  # for an hour
            assert records.running("sender", KEYS["sender"]) == 1
        finally:
            child.kill()
            child.wait()
    assert records.running("sender", KEYS["sender"]) == 0
    meter = _meter(records, "sender", limit=1)
    meter.check(Payer(KEYS["sender"], KEYS["conversation"], KEYS["profile"]))  # its limit lets a turn start


async def test_a_turn_that_never_starts_or_is_cancelled_releases_its_reservation(
        backend: Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SWITCHYARD_TEST_NO_SUCH_KEY", raising=False)
    records = backend.usage()
    running = asyncio.Event()

    async def agent(prompt: str, request: dict[str, object]) -> str:
        running.set()
        await asyncio.Event().wait()  # until cancelled
        return "never"

    keyless = ProviderSettings(type="claude", api_key_env="SWITCHYARD_TEST_NO_SUCH_KEY")
    home = Home(tmp_path / "home")
    runner = ProviderRunner(home, {"keyless": keyless}, {"agent": agent, "echo": _echo}, sessions=file_sessions(home),
                            meter=_meter(records, "sender", limit=1))
    payer = PAYERS["sender"][0]

    async def turn(provider: str) -> str:
        result = await runner.run(provider, TurnRequest("hi", tmp_path, payer=payer))
        return result.stdout

    with pytest.raises(ProviderRefused):  # its key is not set: its CLI never starts
        await turn("keyless")
    assert records.running("sender", payer.sender) == 0
    cancelled = asyncio.create_task(turn("agent"))
    await asyncio.wait_for(running.wait(), 10)
    assert records.running("sender", payer.sender) == 1
    cancelled.cancel()
    await asyncio.gather(cancelled, return_exceptions=True)
    assert records.running("sender", payer.sender) == 0
    assert await turn("echo") == "hi"  # with 1 turn a day, this one still starts


async def _echo(prompt: str, request: dict[str, object]) -> str:
    return prompt
