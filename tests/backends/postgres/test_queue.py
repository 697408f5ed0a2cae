"""The postgres backend's queue in process, with a scripted handler: order, keys, retries, dead letters,
duplicates, and taking in from incoming/ (PgProcessing over a real PostgreSQL; SWITCHYARD_TEST_DSN)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

from gateway.api import PermanentError
from gateway.home import Home
from gateway.models import IncomingPayload, OutgoingPayload
from gateway.settings import Settings
from gateway.spool.queue import FileQueue
from gateway.telemetry.events import EventLog, read_events
from tests.backends.postgres.helpers import pg_runtime, worker_parts
from tests.unit.gateway.runtime.test_worker import UNSTORABLE, UNSTORABLE_IDS, unstorable_payload

pytestmark = pytest.mark.timeout(60)


def message(seq: int, conversation: str, text: str = "", **fields: Any) -> IncomingPayload:
    values: dict[str, Any] = {"channel": "console", "channelProfileId": "console", "sender": "Ada",
                              "senderId": conversation, "message": text or f"hello {seq}",
                              "timestamp": 1_700_000_000_000 + seq, "messageId": f"{conversation}-{seq:05d}",
                              "conversationId": conversation, **fields}
    return IncomingPayload(**values)


@dataclass
class ScriptedHandler:
    """Answers each message after `delay_s`, recording when it ran; `fail` maps a messageId to how many
    times it fails first (-1: always; "permanent": a PermanentError)."""

    delay_s: float = 0.0
    fail: dict[str, Any] = field(default_factory=dict)
    calls: list[tuple[str, float, float]] = field(default_factory=list)  # (messageId, start, end)
    running: int = 0
    most_running: int = 0
    seen_files: dict[str, list[bytes]] = field(default_factory=dict)

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def handle(self, msg: IncomingPayload) -> list[OutgoingPayload]:
        start = time.monotonic()
        if msg.files:
            self.seen_files[msg.messageId] = [Path(path).read_bytes() for path in msg.files]
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            await asyncio.sleep(self.delay_s)
            rule = self.fail.get(msg.messageId)
            if rule == "permanent":
                raise PermanentError("cannot be done")
            if rule == -1 or (isinstance(rule, int) and rule > 0):
                if isinstance(rule, int) and rule > 0:
                    self.fail[msg.messageId] = rule - 1
                raise RuntimeError(f"flaky {msg.messageId}")
        finally:
            self.running -= 1
            self.calls.append((msg.messageId, start, time.monotonic()))
        return [OutgoingPayload.reply_to(msg, f"re {msg.messageId}", agent="test", timestamp=0)]


class Rig:
    """One PgProcessing on a temporary home, fed by files dropped into incoming/."""

    def __init__(self, root: Path, dsn: str, handler: ScriptedHandler, **queue: Any):
        self.home = Home(root)
        self.home.create()
        self.dsn = dsn
        self.handler = handler
        self.settings = Settings.model_validate({"queue": {"backend": "postgres", "fsync": False, "lease_sec": 2,
                                                           "backoff_initial_ms": 50, "backoff_max_ms": 200,
                                                           **queue}})
        self.events = EventLog(self.home.events_file)
        self.queue = FileQueue(self.home, fsync=False, max_payload_bytes=self.settings.queue.max_payload_bytes)
        self.dropped = 0

    async def start(self) -> None:
        self.queue.open()
        self.runtime, self.backend = pg_runtime(worker_parts(self.home, self.settings, self.events, self.queue))
        self.runtime.open()
        await self.runtime.start(self.handler)
        self.tasks = self.runtime.run()

    async def stop(self, grace_s: float) -> None:
        if not self.tasks:
            return  # stopped already
        await self.runtime.stop(grace_s)
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks = []
        await self.runtime.close()

    def drop(self, payload: IncomingPayload | bytes, name: str | None = None, *, mtime_ns: int | None = None) -> bytes:
        self.dropped += 1
        data = payload if isinstance(payload, bytes) else payload.to_json()
        name = name or f"{self.dropped:07d}.json"
        tmp = self.home.incoming / f"{name}.tmp"
        tmp.write_bytes(data)
        if mtime_ns is not None:  # the file appears with this mtime
            os.utime(tmp, ns=(mtime_ns, mtime_ns))
        os.rename(tmp, self.home.incoming / name)
        self.queue.notice(name)
        self.runtime.wake()
        return data

    def rows(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.dsn) as conn:
            return conn.execute(sql, params).fetchall()

    def replies(self) -> list[str]:
        """messageIds of the replies in switchyard_outbox, in insertion order."""
        return [r[0] for r in self.rows("SELECT payload->>'messageId' FROM switchyard_outbox ORDER BY id")]

    async def until(self, condition: Any, timeout_s: float = 20) -> Any:
        deadline = time.monotonic() + timeout_s
        while not (result := condition()):
            assert time.monotonic() < deadline, "condition not met in time"
            await asyncio.sleep(0.05)
        return result

    def events_named(self, name: str) -> list[dict[str, Any]]:
        self.events.flush()
        return [e for e in read_events(self.home.events_file) if e.get("event") == name]


@pytest.fixture
async def rig_factory(tmp_path: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    from gateway.backends.postgres import schema

    monkeypatch.setenv("SWITCHYARD_DSN", pg_dsn)
    schema.migrate(pg_dsn)
    made: list[Rig] = []

    async def make(handler: ScriptedHandler, **queue: Any) -> Rig:
        rig = Rig(tmp_path / f"home{len(made)}", pg_dsn, handler, **queue)
        await rig.start()
        made.append(rig)
        return rig

    yield make
    for rig in made:
        await rig.stop(1.0)
        rig.queue.close()
        rig.events.close()


def by_id(calls: list[tuple[str, float, float]]) -> dict[str, tuple[float, float]]:
    return {mid: (start, end) for mid, start, end in calls}


async def test_claims_in_file_order(rig_factory: Any) -> None:
    rig = await rig_factory(ScriptedHandler(), max_concurrency=1)
    ids = [rig.drop(message(seq, f"c{seq % 5}")) and f"c{seq % 5}-{seq:05d}" for seq in range(30)]
    await rig.until(lambda: len(rig.replies()) == 30)
    assert [c[0] for c in rig.handler.calls] == ids
    assert rig.replies() == ids


async def test_one_at_a_time_in_order_per_conversation_and_parallel_across(rig_factory: Any) -> None:
    rig = await rig_factory(ScriptedHandler(delay_s=0.05), max_concurrency=4)
    for seq in range(40):
        rig.drop(message(seq, f"c{(seq // 3) % 4}"))  # runs of three: the next one must wait
    await rig.until(lambda: len(rig.replies()) == 40)
    for conversation in ("c0", "c1", "c2", "c3"):
        runs = [c for c in rig.handler.calls if c[0].startswith(conversation + "-")]
        assert [c[0] for c in runs] == sorted(c[0] for c in runs), f"{conversation} out of order"
        for earlier, later in zip(runs, runs[1:], strict=False):
            assert earlier[2] <= later[1], f"{conversation} ran twice at once"
    assert rig.handler.most_running > 1, "independent conversations ran in parallel"


async def test_a_message_naming_a_run_waits_for_its_run_and_its_conversation(rig_factory: Any) -> None:
    handler = ScriptedHandler(delay_s=0.3)
    rig = await rig_factory(handler, max_concurrency=4)
    rig.drop(message(1, "a", workflowRunId="r1"))      # holds run r1 and conversation a
    rig.drop(message(2, "b", workflowRunId="r1"))      # same run, other conversation: after 1
    rig.drop(message(3, "a"))                          # same conversation, no run: after 1
    rig.drop(message(4, "c"))                          # independent: at once
    await rig.until(lambda: len(rig.replies()) == 4)
    calls = by_id(handler.calls)
    first = calls["a-00001"]
    assert calls["b-00002"][0] >= first[1] and calls["a-00003"][0] >= first[1]
    assert calls["c-00004"][0] < first[1], "an independent conversation did not wait"


async def test_a_retry_keeps_its_place_and_counts_its_attempts(rig_factory: Any) -> None:
    handler = ScriptedHandler(fail={"c-00001": 2})
    rig = await rig_factory(handler, max_concurrency=4)
    rig.drop(message(1, "c"))
    rig.drop(message(2, "c"))
    rig.drop(message(3, "other"))
    await rig.until(lambda: len(rig.replies()) == 3)
    order = [c[0] for c in handler.calls if c[0].startswith("c-")]
    assert order == ["c-00001", "c-00001", "c-00001", "c-00002"], "the retried message kept its place"
    assert rig.replies().index("c-00001") < rig.replies().index("c-00002")
    (attempts, errors, state), = rig.rows("SELECT attempts, errors, state FROM switchyard_messages "
                                          "WHERE name = '0000001.json'")
    assert (attempts, len(errors), state) == (2, 2, "done")
    assert len(rig.events_named("job.requeued")) == 2
    assert rig.rows("SELECT count(*) FROM switchyard_messages WHERE state = 'done'") == [(3,)]


async def test_a_dead_letter_keeps_its_original_bytes_and_the_sender_gets_an_apology(rig_factory: Any) -> None:
    handler = ScriptedHandler(fail={"c-00001": -1, "c-00003": "permanent"})
    rig = await rig_factory(handler, max_concurrency=2, max_attempts=3)
    original = rig.drop(message(1, "c", text="please   keep\tthese bytes"))
    rig.drop(message(2, "c"))
    permanent = rig.drop(message(3, "c"))
    garbage = rig.drop(b"{not json")
    await rig.until(lambda: len(rig.rows("SELECT 1 FROM switchyard_messages WHERE state IN ('done', 'dead')")) == 4)
    # a dead letter's event is written just after its row commits
    await rig.until(lambda: len(rig.events_named("job.failed.final")) >= 2 and rig.events_named("message.invalid"))
    dead = {name: (bytes(payload), attempts, reason) for name, payload, attempts, reason in rig.rows(
        "SELECT name, payload, attempts, reason FROM switchyard_messages WHERE state = 'dead'")}
    assert dead["0000001.json"][0] == original and dead["0000001.json"][1] == 3
    assert "failed 3 time(s)" in dead["0000001.json"][2]
    assert dead["0000003.json"][0] == permanent and "cannot be done" in dead["0000003.json"][2]
    assert dead["0000004.json"][0] == garbage and "not valid JSON" in dead["0000004.json"][2]
    texts = {r[0]: r[1] for r in rig.rows("SELECT payload->>'messageId', payload->>'message' FROM switchyard_outbox")}
    assert "could not process" in texts["c-00001"] and texts["c-00002"] == "re c-00002"
    assert len(rig.events_named("job.failed.final")) == 2 and len(rig.events_named("message.invalid")) == 1


async def test_a_duplicate_within_the_window_is_skipped(rig_factory: Any) -> None:
    handler = ScriptedHandler()
    rig = await rig_factory(handler)
    rig.drop(message(1, "c"))
    await rig.until(lambda: len(rig.replies()) == 1)
    rig.drop(message(1, "c"))  # the same (channel, profile, messageId) again, under another file name
    await rig.until(lambda: rig.events_named("message.duplicate"))
    assert len(handler.calls) == 1 and rig.replies() == ["c-00001"]


async def test_taking_in_twice_stores_once_and_another_file_under_a_taken_name_is_kept(
        rig_factory: Any) -> None:
    from gateway.backends.postgres.intake import _insert

    rig = await rig_factory(ScriptedHandler())
    with psycopg.connect(rig.dsn, autocommit=True) as conn, conn.cursor() as cursor:
        first = _insert(cursor, "x.json", b"one", ["", "", "", [], None])
        again = _insert(cursor, "x.json", b"one", ["", "", "", [], None])  # a crash before its unlink
        other = _insert(cursor, "x.json", b"two", ["", "", "", [], None])
    assert first is not None and again is None and other is not None
    assert rig.rows("SELECT name, payload FROM switchyard_messages WHERE name LIKE 'x%%' ORDER BY id") == [
        ("x.json", b"one"), ("x.again-1.json", b"two")]


async def test_a_file_under_a_taken_name_is_taken_in_under_a_new_one_and_the_same_file_once(
        rig_factory: Any) -> None:
    """The intake's one-statement path stores nothing when the name is taken; the careful path then tells
    a file stored before (only unlinked) from another one (stored under a new name, and answered)."""
    rig = await rig_factory(ScriptedHandler())
    first = rig.drop(message(1, "c1"), name="taken.json")
    await rig.until(lambda: len(rig.replies()) == 1)
    rig.drop(first, name="taken.json")  # as if the unlink after its commit never happened
    await rig.until(lambda: not list(rig.home.incoming.glob("*.json")))
    rig.drop(message(2, "c1"), name="taken.json")
    await rig.until(lambda: len(rig.replies()) == 2 and not list(rig.home.incoming.glob("*.json")))
    assert rig.rows("SELECT name FROM switchyard_messages ORDER BY id") == [("taken.json",), ("taken.again-1.json",)]


async def test_hostile_files_are_quarantined_locally(rig_factory: Any) -> None:
    rig = await rig_factory(ScriptedHandler(), max_payload_bytes=1024)
    os.mkfifo(rig.home.incoming / "0000001.json")
    os.symlink("/etc/passwd", rig.home.incoming / "0000002.json")
    (rig.home.incoming / "0000003.json").write_bytes(b"x" * 5000)
    rig.drop(message(4, "c"), "0000004.json")
    rig.queue.rescan()
    await rig.until(lambda: len(rig.replies()) == 1)
    await rig.until(lambda: len(rig.events_named("message.invalid")) == 3)
    assert sorted(p.name for p in rig.home.failed.iterdir() if not p.name.endswith(".error.json")) == [
        "0000001.json", "0000002.json", "0000003.json"]
    assert rig.rows("SELECT name FROM switchyard_messages") == [("0000004.json",)]
    assert not list(rig.home.incoming.iterdir())



@pytest.mark.parametrize(("field", "value", "reason", "told"), UNSTORABLE, ids=UNSTORABLE_IDS)
async def test_text_no_store_can_hold_is_invalid_input_and_the_sender_is_told(
        rig_factory: Any, field: str, value: object, reason: str, told: bool) -> None:
    """The file backend's cases (tests/unit/gateway/runtime/test_worker.py), with the same outcome: dead with its
    bytes and why, the sender told where a conversation can be addressed, the same and other conversations
    answered."""
    rig = await rig_factory(ScriptedHandler(), max_concurrency=2)
    content = rig.drop(unstorable_payload(field, value))
    rig.drop(message(2, "c1"))
    rig.drop(message(3, "c2"))
    await rig.until(lambda: {"c1-00002", "c2-00003"} <= set(rig.replies()))
    await rig.until(lambda: rig.rows("SELECT 1 FROM switchyard_messages WHERE state = 'dead'"))
    await rig.until(lambda: rig.events_named("message.invalid"))  # written just after its row commits
    (payload, stored_reason), = rig.rows("SELECT payload, reason FROM switchyard_messages WHERE state = 'dead'")
    assert bytes(payload) == content and reason in stored_reason
    apologies = rig.rows("SELECT payload->>'conversationId', payload->>'message' FROM switchyard_outbox "
                         "WHERE payload->>'message' LIKE 'Sorry, I could not take in%%'")
    assert [(conversation, reason in text) for conversation, text in apologies] == ([("c1", True)] if told else [])
    assert rig.events_named("message.invalid") and not list(rig.home.incoming.glob("*.json"))


async def test_a_file_the_database_refuses_is_dead_lettered_and_the_intake_goes_on(rig_factory: Any) -> None:
    """A name that is not UTF-8 (a program wrote bytes) cannot be stored: that file is the database's
    refusal, not the database being away, so it goes to failed/ with its bytes and why, its sender is
    told, and the files behind it are taken in and answered."""
    rig = await rig_factory(ScriptedHandler(), max_concurrency=1)
    refused = os.fsdecode(b"0000001-\xff.json")
    content = rig.drop(message(1, "c1"), name=refused)
    rig.drop(message(2, "c1"), name="0000002.json")
    rig.drop(message(3, "c2"), name="0000003.json")
    await rig.until(lambda: {"c1-00002", "c2-00003"} <= set(rig.replies()))
    assert (rig.home.failed / refused).read_bytes() == content
    report = json.loads((rig.home.failed / f"{refused}.error.json").read_bytes())
    assert "cannot be stored in the database: UnicodeEncodeError" in report["reason"]
    await rig.until(lambda: "c1-00001" in rig.replies())
    texts = dict(rig.rows("SELECT payload->>'messageId', payload->>'message' FROM switchyard_outbox"))
    assert texts["c1-00001"].startswith("Sorry, I could not take in your message: cannot be stored in the database")
    assert not rig.events_named("queue.error") and not list(rig.home.incoming.glob("*.json"))


class QuotingHandler(ScriptedHandler):
    """Fails `failing` with an error quoting a NUL (as a provider's output may), every time."""

    def __init__(self, failing: str):
        super().__init__()
        self.failing = failing

    async def handle(self, msg: IncomingPayload) -> list[OutgoingPayload]:
        if msg.messageId == self.failing:
            raise RuntimeError("provider said \x00 and \udcff")
        return await super().handle(msg)


async def test_an_error_quoting_text_no_store_can_hold_is_counted_and_dead_lettered(rig_factory: Any) -> None:
    """Its retries are counted and it ends dead with its bytes, its sender told, its conversation going on
    (before: recording the error failed, and the job was retried uncounted, forever, holding its key)."""
    rig = await rig_factory(QuotingHandler("c1-00001"), max_concurrency=2, max_attempts=2)
    content = rig.drop(message(1, "c1"))
    rig.drop(message(2, "c1"))
    rig.drop(message(3, "c2"))
    await rig.until(lambda: {"c1-00001", "c1-00002", "c2-00003"} <= set(rig.replies()))
    (payload, reason), = rig.rows("SELECT payload, reason FROM switchyard_messages WHERE state = 'dead'")
    assert bytes(payload) == content and "provider said" in reason
    texts = dict(rig.rows("SELECT payload->>'messageId', payload->>'message' FROM switchyard_outbox"))
    assert texts["c1-00001"].startswith("Sorry") and texts["c1-00002"] == "re c1-00002"


async def test_a_reply_the_database_refuses_is_its_messages_failure_not_the_queues(rig_factory: Any) -> None:
    """Any refusal but a lost connection (here a constraint) ends that message dead with why, once; its
    conversation and the others go on."""
    rig = await rig_factory(ScriptedHandler(), max_concurrency=2)
    with psycopg.connect(rig.dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE switchyard_outbox ADD CONSTRAINT refuse_one "
                     "CHECK (payload->>'message' <> 're c1-00001')")
    content = rig.drop(message(1, "c1"))
    rig.drop(message(2, "c1"))
    rig.drop(message(3, "c2"))
    await rig.until(lambda: {"c1-00002", "c2-00003"} <= set(rig.replies()))
    (payload, reason), = rig.rows("SELECT payload, reason FROM switchyard_messages WHERE state = 'dead'")
    assert bytes(payload) == content and "the storage refused its bookkeeping: CheckViolation" in reason
    assert [e["job_id"] for e in rig.events_named("job.failed.final")] == ["0000001.json"]
    assert [c[0] for c in rig.handler.calls].count("c1-00001") == 1


class RefusingPool:
    """The real pool, refusing connections while `down` is set (the database restarting)."""

    def __init__(self, pool: Any):
        self.pool = pool
        self.down = True
        self.refused = 0

    def connection(self, *args: Any, **kwargs: Any) -> Any:
        if self.down:
            self.refused += 1
            raise psycopg.OperationalError("connection refused (test)")
        return self.pool.connection(*args, **kwargs)


async def test_files_arriving_while_the_database_is_away_wait_in_incoming_and_keep_their_order(
        rig_factory: Any) -> None:
    handler = ScriptedHandler()
    rig = await rig_factory(handler, max_concurrency=1)
    assert rig.backend.intake is not None
    refusing = RefusingPool(rig.backend.intake.pool)  # with attachments
    refusing_async = RefusingPool(rig.backend.intake.async_pool)  # without
    rig.backend.intake.pool, rig.backend.intake.async_pool = refusing, refusing_async
    ids = []
    for seq in range(10):
        rig.drop(message(seq, f"c{seq % 3}"))
        ids.append(f"c{seq % 3}-{seq:05d}")
    await rig.until(lambda: refusing.refused + refusing_async.refused >= 2)
    assert len(list(rig.home.incoming.glob("*.json"))) == 10, "nothing taken in, nothing lost"
    assert any("cannot take in" in e["reason"] for e in rig.events_named("queue.error"))
    refusing.down = refusing_async.down = False
    await rig.until(lambda: len(rig.replies()) == 10)
    assert [c[0] for c in handler.calls] == ids
    assert any("database reachable again" in e["reason"] for e in rig.events_named("queue.recovered"))


async def test_a_file_dropped_after_a_clock_step_back_is_taken_in_after_those_seen_before_it(
        rig_factory: Any) -> None:
    handler = ScriptedHandler()
    rig = await rig_factory(handler, max_concurrency=1)
    assert rig.backend.intake is not None
    refusing = RefusingPool(rig.backend.intake.pool)  # files pile up in incoming/ while the database is away
    refusing_async = RefusingPool(rig.backend.intake.async_pool)
    rig.backend.intake.pool, rig.backend.intake.async_pool = refusing, refusing_async
    rig.drop(message(1, "c1"), "zz-first.json")
    rig.drop(message(2, "c1"), "aa-second.json", mtime_ns=time.time_ns() - 3600 * 10**9)  # the clock stepped back
    await rig.until(lambda: refusing.refused + refusing_async.refused >= 2)
    refusing.down = refusing_async.down = False
    await rig.until(lambda: len(rig.replies()) == 2)
    assert [c[0] for c in handler.calls] == ["c1-00001", "c1-00002"]


async def test_an_attachment_travels_in_the_database_to_the_worker(rig_factory: Any) -> None:
    rig = await rig_factory(ScriptedHandler(delay_s=0.5), max_concurrency=1)
    folder = rig.home.files / "console" / "c-1"
    folder.mkdir(parents=True)
    attachment = folder / "report.txt"
    attachment.write_bytes(b"bytes from the channel's host")
    rig.drop(message(1, "c"))
    rig.drop(message(2, "c", files=[str(attachment)]))
    await rig.until(lambda: rig.rows("SELECT 1 FROM switchyard_messages WHERE name = '0000002.json'"))
    attachment.unlink()  # as on a worker's host, which never had it
    await rig.until(lambda: len(rig.replies()) == 2)
    assert rig.handler.seen_files["c-00002"] == [b"bytes from the channel's host"]
    assert rig.rows("SELECT path FROM switchyard_files") == [("files/console/c-1/report.txt",)]


async def test_a_stop_right_after_the_start_ends_it_at_once(rig_factory: Any) -> None:
    """SIGTERM right after start: nothing runs, so the stop does not wait out its grace."""
    rig = await rig_factory(ScriptedHandler())
    started = time.monotonic()
    await rig.stop(5.0)
    assert time.monotonic() - started < 2.0, "the stop waited for work that was not there"
    assert rig.rows("SELECT count(*) FROM switchyard_processes") == [(0,)], "its process row left behind"


async def test_connections_the_server_ends_lose_nothing_and_answer_once(
        rig_factory: Any, pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a server restart does to a worker's connections (its pools, the shared one included), done
    to this worker's alone (the server is shared): every message is still answered once, in order."""
    import uuid

    from psycopg.conninfo import make_conninfo

    name = f"sy_ended_{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("SWITCHYARD_DSN", make_conninfo(pg_dsn, application_name=name))
    handler = ScriptedHandler()
    rig = await rig_factory(handler, max_concurrency=2)
    ids = [f"c{seq % 2}-{seq:05d}" for seq in range(10)]
    for seq in range(5):
        rig.drop(message(seq, f"c{seq % 2}"))
    await rig.until(lambda: len(rig.replies()) == 5)
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        ended = admin.execute("SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                              "WHERE application_name = %s", (name,)).fetchone()
    assert ended is not None and ended[0] >= 3
    for seq in range(5, 10):
        rig.drop(message(seq, f"c{seq % 2}"))
    await rig.until(lambda: len(rig.replies()) == 10, timeout_s=30)
    assert sorted(rig.replies()) == sorted(ids)
    for conversation in ("c0", "c1"):
        assert [c[0] for c in handler.calls if c[0].startswith(conversation)] == [i for i in ids
                                                                                 if i.startswith(conversation)]


async def test_a_process_detail_no_store_holds_is_recorded_made_safe(rig_factory: Any) -> None:
    """A reason may quote a NUL or a lone surrogate: the process row holds it as U+FFFD, and the
    database is never called away for it."""
    rig = await rig_factory(ScriptedHandler())
    rig.backend.detail = {"database": "connected", "note": "a\x00b\ud800c"}
    await rig.until(lambda: rig.rows("SELECT detail->>'note' FROM switchyard_processes") == [("a\ufffdb\ufffdc",)])
    assert rig.backend.stats()["database"] == "connected"
    assert not [e for e in rig.events_named("queue.error") if "unreachable" in e["reason"]]


async def test_a_sweep_the_database_refuses_is_said_as_what_it_is_never_database_away(
        rig_factory: Any, caplog: pytest.LogCaptureFixture) -> None:
    rig = await rig_factory(ScriptedHandler())
    with psycopg.connect(rig.dsn, autocommit=True) as conn:  # every write of this process's row is refused
        conn.execute("ALTER TABLE switchyard_processes ADD CONSTRAINT refused CHECK (pid < 0) NOT VALID")
    refused = await rig.until(lambda: [e for e in rig.events_named("queue.error") if "sweep failed" in e["reason"]])
    assert "CheckViolation" in refused[0]["reason"]
    assert rig.backend.stats()["database"] == "connected"  # not "reconnecting since …"
    assert not [e for e in rig.events_named("queue.error") if "unreachable" in e["reason"]]
    assert "the database is unreachable" not in caplog.text
    rig.drop(message(1, "c1"))  # and the queue goes on
    await rig.until(lambda: rig.replies() == ["c1-00001"])


class ReadOnlyPool:
    """The real async pool whose connections the server runs read-only while `read_only` is set (a primary
    demoted in a failover, a maintenance window): PostgreSQL answers every write with ReadOnlySqlTransaction."""

    def __init__(self, pool: Any):
        self.pool = pool
        self.read_only = True
        self.refused = 0

    @contextlib.asynccontextmanager
    async def connection(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        async with self.pool.connection(*args, **kwargs) as conn:
            read_only = self.read_only
            if read_only:
                self.refused += 1
                await conn.execute("SET default_transaction_read_only = on")
            try:
                yield conn
            finally:
                if read_only:
                    await conn.execute("RESET default_transaction_read_only")


async def test_a_read_only_database_is_waited_out_never_a_messages_failure(rig_factory: Any) -> None:
    """A server that takes no writes for now refuses the database, not this file: the file waits in
    incoming/ and is answered once writes are taken again (it is not moved to failed/)."""
    rig = await rig_factory(ScriptedHandler(), max_concurrency=1)
    assert rig.backend.intake is not None
    read_only = ReadOnlyPool(rig.backend.intake.async_pool)
    rig.backend.intake.async_pool = read_only
    rig.drop(message(1, "c1"))
    # `refused` counts an attempt as it starts, while the file is claimed (in processing/): wait for it back
    await rig.until(lambda: read_only.refused >= 2 and len(list(rig.home.incoming.glob("*.json"))) == 1)
    assert not list(rig.home.failed.glob("*.json"))
    read_only.read_only = False
    await rig.until(lambda: "c1-00001" in rig.replies())
    assert not list(rig.home.failed.glob("*.json"))
