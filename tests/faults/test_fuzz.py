"""Hypothesis-fuzzed payloads and ids: nothing crashes, every bad payload is quarantined with a reason.

About 10,300 payload and id cases per run (4,000 parsed payloads, 6,000 file names from ids, 8 batches
of 20-40 files through a real worker), plus 1,500 scheduler sequences.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gateway.backends.files.answered import AnsweredIndex
from gateway.backends.runtime import WorkerStores
from gateway.home import Home
from gateway.models import IncomingPayload, OutgoingPayload, UnstorableText
from gateway.outbox import FileOutbox, outgoing_name
from gateway.payloads import ordering_keys, parse_payload
from gateway.runtime.keys import KeyScheduler
from gateway.runtime.worker import Worker
from gateway.settings import QueueSettings
from gateway.spool.queue import FileQueue
from gateway.storable import storable
from gateway.telemetry.events import EventLog
from gateway.testing import async_wait_until

# Under `coverage run` (which sets COVERAGE_RUN) every line is traced several times slower: the
# fuzz tests draw a quarter of their examples there, so they end within the per-test timeout.
SCALE = 4 if os.environ.get("COVERAGE_RUN") else 1

MAX_BYTES = 4096
REQUIRED = ("channel", "message", "timestamp", "messageId")
# Text no store can hold (a NUL, lone surrogates) among the drawn strings, keys included: refused, naming where
unstorable_text = st.sampled_from(["\x00", "a\x00b", "\ud800", "x\udfffy", "\ud83d"])
text = st.one_of(st.text(max_size=40), unstorable_text)
ids = st.one_of(text, st.sampled_from(["..", ".", "/", "../../etc/passwd", "a/b", "\x00", "-", " ", "con", "~"]))
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | text,
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
                           max_leaves=8)
fields = st.fixed_dictionaries({}, optional={
    "channel": st.one_of(ids, json_values), "channelProfileId": st.one_of(ids, json_values),
    "sender": st.one_of(text, json_values), "senderId": st.one_of(ids, json_values),
    "message": st.one_of(text, json_values), "timestamp": st.one_of(st.integers(), json_values),
    "messageId": st.one_of(ids, json_values), "conversationId": st.one_of(ids, json_values),
    "files": st.one_of(st.lists(text, max_size=2), json_values), "workflowRunId": st.one_of(ids, json_values),
    "extra": json_values})
# Oversized payloads are drawn by length, not byte by byte: a few KB of random bytes per example
# exhausts Hypothesis's data budget, and a batch of them was rejected instead of run.
oversized = st.integers(min_value=MAX_BYTES + 1, max_value=MAX_BYTES + 50).map(lambda n: b'{"m":"' + b"x" * n)
raw_bytes = st.one_of(st.binary(max_size=200), fields.map(lambda d: json.dumps(d).encode()), oversized)


@settings(max_examples=4000 // SCALE, deadline=None)
@given(raw_bytes)
@example(b'{"channel":" ","message":"","messageId":" ","":{"\\u0000":null},"timestamp":0}')  # CI found it: a NUL key
def test_parse_payload_accepts_or_gives_a_reason_never_crashes(data: bytes) -> None:
    try:
        message = parse_payload(data, MAX_BYTES)
    except ValueError as exc:
        assert str(exc).strip(), "a refusal always says why"
        apology = exc.apology() if isinstance(exc, UnstorableText) else None
        assert apology is None or storable(apology.to_json().decode()), "the sender can always be told"
        return
    assert len(data) <= MAX_BYTES and message.channel and message.messageId
    assert ordering_keys(message)
    written = message.to_json()
    json.loads(written)  # what is accepted can be written back
    assert storable(written.decode()), "and held by every store"


@settings(max_examples=6000 // SCALE, deadline=None)
@given(channel=ids, message_id=ids, timestamp=st.integers(min_value=0, max_value=2**63))
def test_outgoing_names_stay_one_file_name(channel: str, message_id: str, timestamp: int) -> None:
    reply = OutgoingPayload(channel=channel or "c", message="hi", timestamp=timestamp, messageId=message_id or "m")
    name = outgoing_name(reply)
    assert "/" not in name and "\x00" not in name and not name.startswith(".")
    assert name.endswith(".json") and len(name.encode()) < 255


OPS = st.lists(st.tuples(st.sampled_from(["add", "hold", "release", "ready", "finish"]),
                         st.integers(0, 5), st.integers(0, 3)), max_size=40)


@settings(max_examples=1500 // SCALE, deadline=None)
@given(OPS)
def test_key_scheduler_matches_the_simple_rule(ops: list[tuple[str, int, int]]) -> None:
    """Against a reference: a message starts iff no earlier pending message shares a key and its keys are free."""
    scheduler: KeyScheduler[int] = KeyScheduler(max_concurrency=3)
    pending: dict[int, tuple[tuple[str, ...], bool]] = {}  # order → (keys, held)
    running: list[tuple[str, ...]] = []
    order = 0
    for op, a, b in ops:
        keys = tuple(sorted({f"k{a % 3}", f"k{b % 3}"})) if a != b else (f"k{a % 3}",)
        if op in ("add", "hold"):
            order += 1
            if op == "add":
                scheduler.add((order, ""), keys, order)
            else:
                scheduler.hold((order, ""), keys)
            pending[order] = (keys, op == "hold")
        elif op == "release":
            held = [o for o, (_, h) in pending.items() if h]
            if held:
                target = held[a % len(held)]
                if b % 2:
                    scheduler.add((target, ""), pending[target][0], target)
                    pending[target] = (pending[target][0], False)
                else:
                    scheduler.release_hold((target, ""))
                    del pending[target]
        elif op == "finish" and running:
            scheduler.finish(running.pop(a % len(running)))
        else:
            started = [item for _, item in scheduler.ready()]
            expected: list[int] = []
            busy = {k for r in running for k in r}
            blocked: set[str] = set()
            for o in sorted(pending):
                k, is_held = pending[o]
                if not is_held and not blocked & set(k) and not busy & set(k) and len(running) + len(expected) < 3:
                    expected.append(o)
                    busy |= set(k)
                blocked |= set(k)
            assert started == expected
            for o in started:
                running.append(pending.pop(o)[0])
    assert scheduler.pending_count == sum(1 for _, h in pending.values() if not h)


class _Echo:
    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def handle(self, message: IncomingPayload) -> list[OutgoingPayload]:
        return [OutgoingPayload.reply_to(message, f"echo {message.message}", agent="t", timestamp=1)]


async def _through_worker(batch: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        home = Home(Path(folder))
        home.create()
        events = EventLog(home.events_file)
        queue = FileQueue(home, fsync=False, max_payload_bytes=MAX_BYTES)
        answered = AnsweredIndex(home.state / "answered.jsonl", window_sec=3600, fsync=False)
        outbox = FileOutbox(home, events, fsync=False)
        queue_settings = QueueSettings(fsync=False, max_payload_bytes=MAX_BYTES)
        worker = Worker(WorkerStores(queue, answered, outbox), _Echo(), events, queue_settings)
        queue.open()
        answered.open()
        for index, data in enumerate(batch):
            (home.incoming / f"{index:04d}.json").write_bytes(data)
        queue.rescan()
        task = asyncio.create_task(worker.run())
        await async_wait_until(lambda: not any(home.incoming.iterdir()) and worker.scheduler.running == 0
                               and not any(home.processing.rglob("*.json")), 20)
        await worker.stop(1.0)
        await task
        _check_outcomes(home, batch)
        events.close()


def _check_outcomes(home: Home, batch: list[bytes]) -> None:
    answered = {p.name for p in home.outgoing.iterdir()}
    for index, data in enumerate(batch):
        name = f"{index:04d}.json"
        report = home.failed / f"{name}.error.json"
        try:
            message = parse_payload(data, MAX_BYTES)
        except ValueError as exc:
            assert (home.failed / name).read_bytes() == data, "the bad bytes are kept as they were"
            assert json.loads(report.read_text())["reason"], "with the reason"
            if isinstance(exc, UnstorableText) and exc.safe is not None and exc.safe.channel != "heartbeat":
                told = outgoing_name(_reply_stub(exc.safe)).rsplit("_", 1)[0]
                assert any(n.startswith(told) for n in answered), f"{name}'s sender was told"
            continue
        assert not report.exists()
        replies = [n for n in answered if n.startswith(outgoing_name(_reply_stub(message)).rsplit("_", 1)[0])]
        assert replies or message.channel == "heartbeat", f"{name} was answered"
    for path in home.outgoing.iterdir():
        assert path.parent == home.outgoing and path.resolve().parent == home.outgoing.resolve()


def _reply_stub(message: IncomingPayload) -> OutgoingPayload:
    return OutgoingPayload.reply_to(message, "", agent="t", timestamp=1)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(raw_bytes, min_size=20, max_size=40))
def test_a_fuzzed_batch_through_the_worker_is_answered_or_quarantined_with_a_reason(batch: list[bytes]) -> None:
    asyncio.run(_through_worker(batch))

