"""One owner per channel profile (PgOutbound and its leases) against a real PostgreSQL: a standby
shows the owner and takes over when it dies, a clean stop releases at once, and an owner that
cannot reach the database stops its channel before anybody else may start it."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from gateway.backends.postgres import schema
from gateway.backends.postgres.outbound import PgOutbound
from gateway.runtime.sending import Sender
from gateway.testing import async_wait_until
from tests.backends.postgres.outbound_kit import CuttableProxy, StubGateway, new_home, settings_for

LEASE_SEC = 3.0

MakeOutbound = Callable[..., Awaitable[tuple[PgOutbound, StubGateway]]]


@pytest.fixture
async def make_outbound(pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[MakeOutbound]:
    schema.migrate(pg_dsn)
    made: list[tuple[PgOutbound, StubGateway]] = []

    async def make(holder: str, dsn: str = pg_dsn) -> tuple[PgOutbound, StubGateway]:
        monkeypatch.setenv(f"SY_DSN_{holder}", dsn)
        gateway = StubGateway(new_home(tmp_path / holder), settings_for(f"SY_DSN_{holder}", LEASE_SEC), holder)
        send_loop = functools.partial(Sender, events=gateway.events, settings=gateway.settings.queue)
        outbound = PgOutbound(gateway.supervisor, gateway.home, gateway.settings, gateway.events,
                              send_loop=send_loop, holder=holder)
        gateway.channels = await outbound.start()
        made.append((outbound, gateway))
        return outbound, gateway

    yield make
    for outbound, gateway in made:
        gateway._stopping.set()
        await outbound.delivery.stop(1.0)
        await outbound.stop()


async def kill(outbound: PgOutbound) -> None:
    """Ends a process's outbound side without releasing anything, as kill -9 would."""
    outbound.supervisor.stopping.set()
    for task in outbound._tasks:
        task.cancel()
    await asyncio.gather(*outbound._tasks, return_exceptions=True)
    await outbound.delivery.stop(0.1)
    outbound.leases.held.clear()
    await outbound.leases.close()


def state(gateway: StubGateway) -> tuple[str, str]:
    entry = gateway.channel_status.get("p", {})
    return str(entry.get("state")), str(entry.get("reason"))


async def test_a_standby_shows_the_owner_and_takes_over_within_lease_sec_when_the_owner_dies(
        make_outbound: MakeOutbound) -> None:
    first, first_gw = await make_outbound("A")
    second, second_gw = await make_outbound("B")
    assert len(first_gw.started) == 1 and state(first_gw) == ("running", "owner A")
    assert second_gw.started == [] and state(second_gw) == ("standby", "owned by A")
    assert "channel.lease_taken" in first_gw.event_names()
    await kill(first)
    died = time.monotonic()
    await async_wait_until(lambda: second_gw.started, LEASE_SEC * 3)
    took = second_gw.started[0].started_at
    assert took is not None
    print(f"takeover after {took - died:.2f}s (lease_sec {LEASE_SEC:g})")
    assert took - died <= LEASE_SEC * 2  # a lease's life and a few renewal periods: not a timing goal, a bound
    assert state(second_gw) == ("running", "owner B")


async def test_a_clean_stop_releases_the_lease_so_the_standby_need_not_wait_for_its_expiry(
        make_outbound: MakeOutbound) -> None:
    first, first_gw = await make_outbound("A")
    second, second_gw = await make_outbound("B")
    first_gw._stopping.set()
    await first.delivery.stop(1.0)
    await first.stop()
    released = time.monotonic()
    assert "channel.lease_released" in first_gw.event_names()
    await async_wait_until(lambda: second_gw.started, LEASE_SEC * 3)
    took = second_gw.started[0].started_at
    # Without the release the standby waits for expiry: at least 2/3 of lease_sec after the stop (the owner
    # renews every lease_sec / 3). With it, the standby's next look finds the lease free.
    assert took is not None and took - released < LEASE_SEC * 2 / 3


async def test_an_owner_that_cannot_reach_the_database_stops_its_channel_before_another_takes_it(
        make_outbound: MakeOutbound, pg_dsn: str) -> None:
    async with CuttableProxy(pg_dsn) as proxy:
        first, first_gw = await make_outbound("A", proxy.dsn(pg_dsn))
        second, second_gw = await make_outbound("B")
        assert state(second_gw) == ("standby", "owned by A")
        channel = first_gw.started[0]
        proxy.cut()
        cut = time.monotonic()
        await async_wait_until(lambda: channel.stopped_at is not None, LEASE_SEC * 2)
        await async_wait_until(lambda: second_gw.started, LEASE_SEC * 3)
        assert channel.stopped_at is not None and second_gw.started[0].started_at is not None
        print(f"stopped {channel.stopped_at - cut:.2f}s after the cut; taken over after "
              f"{second_gw.started[0].started_at - cut:.2f}s")
        assert channel.stopped_at < second_gw.started[0].started_at  # never two owners at once
        assert channel.stopped_at - cut < LEASE_SEC
        assert first_gw.channels == [] and state(first_gw)[0] == "standby"
        assert "channel.lease_lost" in first_gw.event_names()
        shown = [entry["p"]["reason"] for entry in first_gw.status_history if "p" in entry]
        trouble = next(i for i, reason in enumerate(shown) if "cannot renew its lease" in reason)
        lost = next(i for i, reason in enumerate(shown) if reason.startswith("lease lost"))
        assert trouble < lost  # the status said so while it still owned the channel


async def test_a_lease_the_database_refuses_is_shown_as_what_it_is_never_database_unreachable(
        make_outbound: MakeOutbound, pg_dsn: str) -> None:
    import psycopg

    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # every lease taken is refused
        conn.execute("ALTER TABLE switchyard_leases ADD CONSTRAINT refused CHECK (false) NOT VALID")
    _, gateway = await make_outbound("A")
    await async_wait_until(lambda: state(gateway)[0] == "standby", LEASE_SEC * 3)
    assert state(gateway)[1].startswith("cannot take its lease: CheckViolation"), state(gateway)
    assert gateway.started == []
