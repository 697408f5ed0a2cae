"""PgDelivery against a real PostgreSQL: order per conversation, parallel across them, retries in
place, dead rows, each part once across a takeover, the spec-002 outgoing/ adapter, retention."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from gateway.backends.postgres import schema
from gateway.backends.postgres.dispatcher import PgDelivery
from gateway.backends.postgres.leases import Leases, channel_lease
from gateway.backends.postgres.maintenance import prune
from gateway.home import Home
from gateway.runtime.sending import Sender
from gateway.settings import Settings
from gateway.telemetry.events import EventLog, read_events
from gateway.testing import async_wait_until
from tests.backends.postgres.outbound_kit import (
    CHANNEL,
    CuttableProxy,
    RecordingChannel,
    insert_reply,
    new_home,
    rows,
    settings_for,
)
from tests.backends.postgres.throwaway import ThrowawayServer

LEASE = channel_lease(CHANNEL, "p")


@dataclass
class Owner:
    """One process's delivery side: its lease, its delivery and its channel."""

    leases: Leases
    delivery: PgDelivery
    channel: RecordingChannel
    home: Home
    renewing: asyncio.Task[None]

    def events(self, name: str) -> list[dict[str, object]]:
        return [e for e in read_events(self.home.events_file) if e.get("event") == name]

    async def kill(self) -> None:
        """Stops everything without releasing the lease or finishing a delivery (as kill -9 would)."""
        self.renewing.cancel()
        tasks = [*self.delivery._tasks, *self.delivery._active.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(self.renewing, *tasks, return_exceptions=True)
        await self.delivery.rows.close()
        await self.leases.close()


async def _nothing(name: str, reason: str) -> None:
    return None


MakeOwner = Callable[..., Awaitable[Owner]]


@pytest.fixture
async def make_owner(pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[MakeOwner]:
    async with owners_on(pg_dsn, tmp_path, monkeypatch) as make:
        yield make


@contextlib.asynccontextmanager
async def owners_on(base_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[MakeOwner]:
    """Makes Owners on the database at `base_dsn` (its schema migrated); stops them at the end."""
    schema.migrate(base_dsn)
    monkeypatch.setenv("SY_TEST_DSN", base_dsn)
    owners: list[Owner] = []

    async def make(holder: str, *, lease_sec: float = 30, take: bool = True, dsn: str = base_dsn,
                   **queue: object) -> Owner:
        settings: Settings = settings_for("SY_TEST_DSN", lease_sec, **queue)
        home = new_home(tmp_path / holder)
        leases = Leases(dsn, lease_sec, _nothing, holder=holder)
        if take:
            taken, _ = await async_wait_until_taken(leases)
            assert taken == holder
        events = EventLog(home.events_file)
        delivery = PgDelivery(home, events, settings.queue, dsn, leases,
                              send_loop=functools.partial(Sender, events=events, settings=settings.queue))
        channel = RecordingChannel("p", home, holder)
        delivery.start()
        delivery.add_channel(channel)
        owner = Owner(leases, delivery, channel, home, asyncio.create_task(leases.run()))
        owners.append(owner)
        return owner

    try:
        yield make
    finally:
        for owner in owners:
            if not owner.renewing.done():
                await owner.delivery.stop(1.0)
                owner.renewing.cancel()
                await owner.leases.close()


async def async_wait_until_taken(leases: Leases) -> tuple[str | None, float]:
    """Takes the lease, trying again at its holder's expiry (30 tries at most)."""
    for _ in range(30):
        holder, left = await leases.take(LEASE)
        if holder == leases.holder:
            return holder, left
        await asyncio.sleep(left + 0.05)
    raise AssertionError("the lease was never taken")


def states(dsn: str) -> dict[str, str]:
    return {json.loads(json.dumps(r["payload"]))["message"]: r["state"] for r in rows(dsn)}


async def test_rows_go_out_in_id_order_per_conversation_and_side_by_side_across_conversations(
        make_owner: MakeOwner, pg_dsn: str) -> None:
    owner = await make_owner("A")
    owner.channel.gates["a1"] = asyncio.Event()
    for text in ("a1", "a2", "a3"):
        insert_reply(pg_dsn, "conv-a", text)
    insert_reply(pg_dsn, "conv-b", "b1")
    await async_wait_until(lambda: "b1" in owner.channel.texts(), 10)  # while a1 is held
    assert owner.channel.texts("conv-a") == []  # a2 and a3 wait behind their head
    owner.channel.gates["a1"].set()
    await async_wait_until(lambda: len(owner.channel.texts("conv-a")) == 3, 10)
    assert owner.channel.texts("conv-a") == ["a1", "a2", "a3"]
    await async_wait_until(lambda: set(states(pg_dsn).values()) == {"sent"}, 10)


async def test_waiting_drafts_are_superseded_by_the_newest_and_by_the_final_answer(
        make_owner: MakeOwner, pg_dsn: str) -> None:
    owner = await make_owner("A")
    owner.channel.edits_progress = True  # type: ignore[attr-defined]
    owner.channel.gates["hold"] = asyncio.Event()
    insert_reply(pg_dsn, "conv-a", "hold")
    for text in ("The", "The quick"):
        insert_reply(pg_dsn, "conv-a", text, progressKey="answer:m1", draft=True)
    insert_reply(pg_dsn, "conv-a", "other stream", progressKey="answer:m2", draft=True)
    insert_reply(pg_dsn, "conv-a", "The quick brown fox.", streamKey="answer:m1")
    await async_wait_until(lambda: states(pg_dsn).get("The") == "pending", 10)
    owner.channel.gates["hold"].set()
    await async_wait_until(lambda: set(states(pg_dsn).values()) == {"sent"}, 10)
    assert owner.channel.texts() == ["hold", "other stream", "The quick brown fox."]
    assert len(owner.events("outgoing.skipped")) == 2


async def test_a_draft_for_a_channel_that_cannot_edit_is_recorded_not_sent(make_owner: MakeOwner, pg_dsn: str) -> None:
    owner = await make_owner("A")
    insert_reply(pg_dsn, "conv-a", "The quick", progressKey="answer:m1", draft=True)
    insert_reply(pg_dsn, "conv-a", "The quick brown fox.", streamKey="answer:m1")
    await async_wait_until(lambda: set(states(pg_dsn).values()) == {"sent"}, 10)
    assert owner.channel.texts() == ["The quick brown fox."]


async def test_a_failing_row_keeps_its_place_and_is_retried_with_backoff(make_owner: MakeOwner, pg_dsn: str) -> None:
    owner = await make_owner("A", max_attempts=5)
    owner.channel.failures["a1"] = 2
    insert_reply(pg_dsn, "conv-a", "a1")
    insert_reply(pg_dsn, "conv-a", "a2")
    await async_wait_until(lambda: len(owner.channel.texts()) == 2, 10)
    assert owner.channel.texts() == ["a1", "a2"]
    retries = owner.events("outgoing.retry")
    assert [e["attempt"] for e in retries] == [1, 2]
    await async_wait_until(lambda: states(pg_dsn) == {"a1": "sent", "a2": "sent"}, 10)


async def test_after_max_attempts_a_row_is_dead_with_its_reason_and_the_next_row_goes_out(
        make_owner: MakeOwner, pg_dsn: str) -> None:
    owner = await make_owner("A", max_attempts=3)
    owner.channel.failures["a1"] = 99
    insert_reply(pg_dsn, "conv-a", "a1")
    insert_reply(pg_dsn, "conv-a", "a2")
    await async_wait_until(lambda: owner.channel.texts() == ["a2"], 10)
    dead = [r for r in rows(pg_dsn) if r["state"] == "dead"]
    assert len(dead) == 1 and dead[0]["payload"]["message"] == "a1"  # the original payload is kept
    assert dead[0]["attempts"] == 3 and "a1 failed on purpose" in dead[0]["reason"]
    assert owner.events("outgoing.failed")[0]["attempts"] == 3


async def test_a_permanent_refusal_is_dead_at_once_with_the_reason_and_the_next_row_goes_out(
        make_owner: MakeOwner, pg_dsn: str) -> None:
    owner = await make_owner("A", max_attempts=5)
    owner.channel.refused.add("a1")
    insert_reply(pg_dsn, "conv-a", "a1")
    insert_reply(pg_dsn, "conv-a", "a2")
    await async_wait_until(lambda: owner.channel.texts() == ["a2"], 10)
    [dead] = [r for r in rows(pg_dsn) if r["state"] == "dead"]
    assert dead["attempts"] == 1 and dead["reason"] == "the platform refused it: a1 refused for good"
    assert owner.events("outgoing.retry") == [] and owner.events("outgoing.failed")[0]["attempts"] == 1


async def test_a_platform_error_quoting_a_nul_or_a_lone_surrogate_never_wedges_the_conversation(
        make_owner: MakeOwner, pg_dsn: str) -> None:
    """The platform's error text is kept (as last_error, then the dead reason) with U+FFFD; before, no
    column took it, the update was retried forever as "database unreachable" and a2 never went out."""
    owner = await make_owner("A", max_attempts=2)
    owner.channel.failures["a1"] = 99
    owner.channel.errors["a1"] = "the platform said: bad\x00body\ud800"
    insert_reply(pg_dsn, "conv-a", "a1")
    insert_reply(pg_dsn, "conv-a", "a2")
    await async_wait_until(lambda: owner.channel.texts() == ["a2"], 10)
    [dead] = [r for r in rows(pg_dsn) if r["state"] == "dead"]
    assert "the platform said: bad\ufffdbody\ufffd" in dead["reason"] and dead["attempts"] == 2
    assert owner.delivery.database_error is None and owner.events("outbox.database_unreachable") == []


async def test_a_write_the_database_refuses_is_said_as_what_it_is_never_database_unreachable(
        make_owner: MakeOwner, pg_dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    owner = await make_owner("A")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # marking a row sent is refused from now on
        conn.execute("ALTER TABLE switchyard_outbox ADD CONSTRAINT refused CHECK (state <> 'sent') NOT VALID")
    insert_reply(pg_dsn, "conv-a", "a1")
    await async_wait_until(lambda: "CheckViolation" in caplog.text, 10)
    assert owner.channel.texts() == ["a1"]
    assert owner.delivery.database_error is None and owner.events("outbox.database_unreachable") == []
    assert "the database is unreachable" not in caplog.text


async def test_each_part_is_sent_once_when_another_process_takes_the_profile_over_mid_reply(
        make_owner: MakeOwner, pg_dsn: str) -> None:
    first = await make_owner("A", lease_sec=1.5)
    first.channel.hang_on.add("part2")  # A dies while sending the second part
    insert_reply(pg_dsn, "conv-a", "part1|part2|part3")
    insert_reply(pg_dsn, "conv-a", "after")
    await async_wait_until(lambda: first.channel.texts() == ["part1"], 10)
    await async_wait_until(lambda: rows(pg_dsn)[0]["parts_sent"] == {"0": "A:part1"}, 10)
    await first.kill()
    second = await make_owner("B", lease_sec=1.5)  # waits for A's lease to expire, then takes it
    await async_wait_until(lambda: second.channel.texts() == ["part2", "part3", "after"], 15)
    await async_wait_until(lambda: [r["state"] for r in rows(pg_dsn)] == ["sent", "sent"], 10)
    assert rows(pg_dsn)[0]["parts_sent"] == {}  # the journal is dropped once the reply is sent


async def test_a_process_without_the_lease_delivers_nothing(make_owner: MakeOwner, pg_dsn: str) -> None:
    owner = await make_owner("A")
    intruder = await make_owner("B", take=False)  # configured with the same profile, standing by
    insert_reply(pg_dsn, "conv-a", "a1")
    await async_wait_until(lambda: states(pg_dsn) == {"a1": "sent"}, 10)
    assert owner.channel.texts() == ["a1"]
    assert intruder.channel.texts() == []


async def test_a_file_dropped_into_outgoing_is_taken_into_the_table_and_delivered(
        make_owner: MakeOwner, pg_dsn: str) -> None:
    owner = await make_owner("A")
    from gateway.models import OutgoingPayload

    payload = OutgoingPayload(channel=CHANNEL, channelProfileId="p", conversationId="conv-f", messageId="m1",
                              timestamp=1, message="from a file", sender="switchyard", senderId="switchyard")
    path = owner.home.outgoing / "fake_m1_1.json"
    path.write_bytes(payload.to_json())
    owner.delivery.rescan()
    await async_wait_until(lambda: owner.channel.texts() == ["from a file"], 10)
    assert not path.exists()
    assert [r["name"] for r in rows(pg_dsn)] == ["fake_m1_1.json"]


async def test_files_written_within_one_tick_are_taken_in_and_sent_in_the_order_they_were_written(
        make_owner: MakeOwner, pg_dsn: str) -> None:
    """After a restart (or an overflow of the folder's watch) the files of outgoing/ are taken in by a rescan:
    three parts of one reply with one mtime go out in the order their timestamps say, not by name."""
    owner = await make_owner("A")
    from gateway.models import OutgoingPayload

    written = [("z", 1), ("a", 2), ("m", 3)]  # names sort a, m, z; the outbox wrote z, a, m
    for message_id, stamp in written:
        payload = OutgoingPayload(channel=CHANNEL, channelProfileId="p", conversationId="conv-t", timestamp=stamp,
                                  messageId=message_id, message=f"part {stamp}", sender="switchyard",
                                  senderId="switchyard")
        path = owner.home.outgoing / f"fake_{message_id}_{stamp}.json"
        path.write_bytes(payload.to_json())
        os.utime(path, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))
    owner.delivery.rescan()
    await async_wait_until(lambda: len(owner.channel.texts("conv-t")) == 3, 10)
    assert owner.channel.texts("conv-t") == ["part 1", "part 2", "part 3"]


async def test_a_dropped_file_the_database_refuses_goes_to_failed_and_the_next_one_is_delivered(
        make_owner: MakeOwner, pg_dsn: str) -> None:
    """A file whose row the database refuses is that file's failure (failed/, with the reason), never a
    wedge: before, it was retried forever as "database unreachable" and no later file was taken in."""
    owner = await make_owner("A")
    from gateway.models import OutgoingPayload

    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # as a row no column can hold would be refused
        conn.execute("ALTER TABLE switchyard_outbox ADD CONSTRAINT refused CHECK (conversation <> 'conv-bad')")
    for conversation in ("conv-bad", "conv-nul"):
        payload = OutgoingPayload(channel=CHANNEL, channelProfileId="p", conversationId=conversation, timestamp=1,
                                  messageId=f"m-{conversation[5:]}", message=f"to {conversation[5:]}",
                                  sender="switchyard", senderId="switchyard")
        data = payload.to_json().replace(b'"conv-nul"', b'"conv-nul\\u0000"')  # as another program may write
        (owner.home.outgoing / f"fake_{conversation[5:]}_1.json").write_bytes(data)
    owner.delivery.rescan()
    await async_wait_until(lambda: owner.channel.texts() == ["to nul"], 10)
    assert owner.channel.texts("conv-nul\ufffd") == ["to nul"]  # a NUL no column holds: U+FFFD
    await async_wait_until(lambda: (owner.home.failed / "fake_bad_1.json").exists(), 10)
    report = json.loads((owner.home.failed / "fake_bad_1.json.error.json").read_text())
    assert "cannot be stored in the database: CheckViolation" in str(report)
    assert list(owner.home.outgoing.glob("*.json")) == []


async def test_sent_rows_older_than_the_retention_are_deleted(make_owner: MakeOwner, pg_dsn: str) -> None:
    await make_owner("A", sent_retention_days=1)
    old = insert_reply(pg_dsn, "conv-a", "old")
    insert_reply(pg_dsn, "conv-a", "new")
    await async_wait_until(lambda: set(states(pg_dsn).values()) == {"sent"}, 10)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("UPDATE switchyard_outbox SET sent_at = now() - interval '2 days' WHERE id = %s", (old,))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # the gateway's maintenance prunes the database so
        prune(conn, Settings.model_validate({"queue": {"backend": "postgres", "sent_retention_days": 1}}))
    await async_wait_until(lambda: list(states(pg_dsn)) == ["new"], 10)


async def test_delivery_reconnects_after_the_database_comes_back_and_says_so(make_owner: MakeOwner,
                                                                             pg_dsn: str) -> None:
    async with CuttableProxy(pg_dsn) as proxy:
        owner = await make_owner("A", dsn=proxy.dsn(pg_dsn))
        insert_reply(pg_dsn, "conv-a", "before")
        await async_wait_until(lambda: owner.channel.texts() == ["before"], 10)
        proxy.cut()  # as a database restart does to every connection
        await async_wait_until(lambda: owner.events("outbox.database_unreachable"), 10)
        insert_reply(pg_dsn, "conv-a", "during")  # its notification is lost: nobody listens
        await proxy.restore()
        await async_wait_until(lambda: owner.channel.texts() == ["before", "during"], 20)
        await async_wait_until(lambda: owner.events("outbox.database_reconnected"), 10)
        await async_wait_until(lambda: owner.delivery.listening, 10)
        insert_reply(pg_dsn, "conv-a", "after")
        await async_wait_until(lambda: owner.channel.texts() == ["before", "during", "after"], 10)
        assert owner.leases.held  # a short outage (within the lease) keeps the channel


async def test_a_postgres_restart_mid_delivery_loses_and_repeats_nothing(
        throwaway_pg: ThrowawayServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server stopped and started again (a server of the test's own) while a part is being sent."""
    pg_dsn = throwaway_pg.dsn
    async with owners_on(pg_dsn, tmp_path, monkeypatch) as make_owner:
        owner = await make_owner("A", lease_sec=30)
        owner.channel.gates["a1"] = asyncio.Event()
        for conversation in ("a", "b", "c"):
            for n in range(1, 4):
                insert_reply(pg_dsn, f"conv-{conversation}", f"{conversation}{n}")
        await async_wait_until(lambda: "c3" in owner.channel.texts() and "b3" in owner.channel.texts(), 10)
        await asyncio.to_thread(throwaway_pg.stop)
        try:
            owner.channel.gates.pop("a1").set()  # a1 goes out while the database is down: its row waits
            await async_wait_until(lambda: "a1" in owner.channel.texts(), 10)
            await async_wait_until(lambda: owner.delivery.rows.write_retries >= 2, 20)  # its journal entry waits
            await async_wait_until(lambda: owner.events("outbox.database_unreachable"), 10)
        finally:
            await asyncio.to_thread(throwaway_pg.start)
        await async_wait_until(lambda: owner.channel.texts("conv-a") == ["a1", "a2", "a3"], 30)
        await async_wait_until(lambda: set(states(pg_dsn).values()) == {"sent"}, 30)
        assert sorted(owner.channel.texts()) == sorted(f"{c}{n}" for c in "abc" for n in range(1, 4))  # each once
        assert owner.leases.held  # an outage shorter than the lease keeps the channel
