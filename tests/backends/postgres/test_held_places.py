"""A message put back for a retry keeps its place on the host that ran it (the Worker holds it, so the later
messages of its keys wait for it there). When another host takes it meanwhile (this one was thought dead, or its
key lock lapsed while every connection was being ended), the place must be let go: held for good, it kept that
conversation's later messages claimed here and never started (tests/backends/postgres/test_restart_runs.py)."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from gateway.backends.postgres import schema
from gateway.backends.postgres.db import SharedPool
from gateway.backends.postgres.queue import PgQueue
from tests.backends.postgres.test_queue import message

pytestmark = pytest.mark.timeout(60)


def _queued(dsn: str, count: int) -> None:
    with psycopg.connect(dsn) as conn:
        for seq in range(1, count + 1):
            conn.execute("INSERT INTO switchyard_messages (name, payload, channel, profile, conversation, keys) "
                         "VALUES (%s, %s, 'console', 'console', 'c', '{}')",
                         (f"{seq:07d}.json", message(seq, "c").to_json()))


@pytest.fixture
def shared(pg_dsn: str) -> Iterator[SharedPool]:
    """The pool every handle of a test shares, on the migrated schema; closed after the test."""
    schema.migrate(pg_dsn)
    pool = SharedPool(pg_dsn)
    yield pool
    pool.close()


def _pass(queue: PgQueue) -> list[tuple[int, str]]:
    """One claim pass of a Worker that admits nothing new; what it reports vanished."""
    assert queue.claim_admitted(lambda data: ("conv:c",), lambda keys: False) is None
    queue.end_pass()
    return queue.take_vanished()


def test_a_retry_another_host_took_is_reported_vanished_once(pg_dsn: str, shared: SharedPool) -> None:
    _queued(pg_dsn, 1)
    here, there = PgQueue(shared, holder="here", lease_s=15), PgQueue(shared, holder="there", lease_s=15)
    claimed = here.claim()
    assert claimed is not None
    here.requeue(claimed, "the connection was ended", 0.0)
    assert _pass(here) == [], "still waiting for this host's retry"
    assert there.claim() is not None
    assert _pass(here) == [claimed.order]
    assert _pass(here) == [], "reported once"


def test_a_retry_answered_elsewhere_is_vanished_and_one_claimed_again_here_is_not(pg_dsn: str,
                                                                                   shared: SharedPool) -> None:
    _queued(pg_dsn, 2)
    here, there = PgQueue(shared, holder="here", lease_s=15), PgQueue(shared, holder="there", lease_s=15)
    first, second = here.claim(), here.claim()
    assert first is not None and second is not None
    here.requeue(first, "failed", 0.0)
    here.requeue(second, "failed", 0.0)
    taken = there.claim()
    assert taken is not None and taken.order == first.order
    there.complete(taken)
    again = here.claim_admitted(lambda data: ("conv:c",), lambda keys: True)
    assert again is not None and again.order == second.order
    here.end_pass()
    assert here.take_vanished() == [first.order]


class _AwayOnce:
    """The shared pool, with the next statement's connection ended by the server (the database restarting)."""

    def __init__(self, pool: SharedPool):
        self.pool, self.away = pool, False

    def lone(self) -> object:
        if self.away:
            self.away = False
            raise psycopg.OperationalError("consuming input failed: server closed the connection unexpectedly")
        return self.pool.lone()


def test_a_row_whose_retry_could_not_be_written_yet_is_not_taken_again_by_its_own_pass(pg_dsn: str,
                                                                                        shared: SharedPool) -> None:
    """The Worker writes a retry again and again while the database is away, the message still in hand: a claim
    pass meanwhile must leave the row alone (taken again, it ran twice in this Worker's scheduler and left its
    conversation waiting for good)."""
    _queued(pg_dsn, 1)
    flaky = _AwayOnce(shared)
    queue = PgQueue(flaky, holder="here", lease_s=15)  # type: ignore[arg-type]
    claimed = queue.claim()
    assert claimed is not None
    flaky.away = True
    with pytest.raises(OSError, match="unreachable"):
        queue.requeue(claimed, "failed", 0.0)
    assert queue.claim_admitted(lambda data: ("conv:c",), lambda keys: True) is None, "still in hand"
    queue.end_pass()
    queue.requeue(claimed, "failed", 0.0)  # the Worker's next try
    again = queue.claim_admitted(lambda data: ("conv:c",), lambda keys: True)
    assert again is not None and again.order == claimed.order and again.attempts == 1
