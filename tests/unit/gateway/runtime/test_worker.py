"""The worker: ordering per key, concurrency across keys, retries, dead letters, invalid input, duplicates."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from gateway.api import PermanentError
from gateway.backends.files.answered import AnsweredIndex
from gateway.backends.runtime import StoreAnswer, WorkerStores
from gateway.disk.locks import LockDirectory
from gateway.home import Home
from gateway.models import IncomingPayload, OutgoingPayload
from gateway.outbox import FileOutbox
from gateway.payloads import backoff_seconds
from gateway.runtime.worker import Worker
from gateway.settings import QueueSettings
from gateway.spool import queue as queue_module
from gateway.spool.queue import FileQueue
from gateway.telemetry.events import EventLog, read_events
from gateway.testing import async_wait_until, drop_incoming, make_incoming, read_json_files

Behaviour = Callable[[IncomingPayload], Awaitable[str]]


class ScriptedHandler:
    """Answers with `behaviour(message)`; records start/end order and the peak concurrency."""

    def __init__(self, behaviour: Behaviour | None = None):
        self.behaviour = behaviour or self._echo
        self.log: list[tuple[str, str]] = []
        self.active = 0
        self.peak = 0

    @staticmethod
    async def _echo(message: IncomingPayload) -> str:
        return f"echo: {message.message}"

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def handle(self, message: IncomingPayload) -> list[OutgoingPayload]:
        self.active += 1
        self.peak = max(self.peak, self.active)
        self.log.append(("start", message.message))
        try:
            text = await self.behaviour(message)
        finally:
            self.active -= 1
            self.log.append(("end", message.message))
        return [OutgoingPayload.reply_to(message, text, agent="test", timestamp=message.timestamp)]


@pytest.fixture
def settings() -> QueueSettings:
    return QueueSettings(max_concurrency=4, max_attempts=3, backoff_initial_ms=10, backoff_max_ms=40,
                         fsync=False)


class Harness:
    def __init__(self, home: Home, handler: ScriptedHandler, settings: QueueSettings,
                 locks: LockDirectory | None = None, wants_receipt: Callable[[IncomingPayload], bool] | None = None,
                 store_answer: Callable[[FileQueue], StoreAnswer] | None = None):
        self.home = home
        self.events = EventLog(home.events_file)
        self.queue = FileQueue(home, fsync=False, max_payload_bytes=settings.max_payload_bytes)
        self.answered = AnsweredIndex(home.state / "answered.jsonl", window_sec=3600, fsync=False)
        self.outbox = FileOutbox(home, self.events, fsync=False)
        stores = WorkerStores(self.queue, self.answered, self.outbox, locks=locks,
                              store_answer=store_answer(self.queue) if store_answer else None)
        self.worker = Worker(stores, handler, self.events, settings, wants_receipt=wants_receipt)
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.queue.open()
        self.answered.open()
        self.task = asyncio.create_task(self.worker.run())

    def drop(self, payload, name: str) -> None:
        drop_incoming(self.home, payload, name)
        self.queue.notice(name)
        self.worker.wake()

    def replies(self) -> list[dict]:
        return read_json_files(self.home.outgoing)

    def event_names(self) -> list[str]:
        return [e["event"] for e in read_events(self.home.events_file)]

    async def stop(self) -> None:
        await self.worker.stop(1.0)
        assert self.task is not None
        await self.task
        self.answered.close()
        self.queue.close()


@pytest.fixture
async def make_harness(home: Home, settings: QueueSettings) -> AsyncIterator[Callable[..., Awaitable[Harness]]]:
    created: list[Harness] = []

    async def build(handler: ScriptedHandler | None = None, locks: LockDirectory | None = None,
                    wants_receipt: Callable[[IncomingPayload], bool] | None = None,
                    store_answer: Callable[[FileQueue], StoreAnswer] | None = None, **overrides) -> Harness:
        harness = Harness(home, handler or ScriptedHandler(), settings.model_copy(update=overrides), locks,
                          wants_receipt, store_answer)
        await harness.start()
        created.append(harness)
        return harness

    yield build
    for harness in created:
        await harness.stop()


async def test_a_message_gets_a_reply_and_leaves_the_queue(make_harness, home: Home) -> None:
    harness = await make_harness()
    harness.drop(make_incoming("hi", messageId="m1"), "m1.json")
    replies = await async_wait_until(harness.replies)
    assert replies[0]["message"] == "echo: hi" and replies[0]["originalMessage"] == "hi"
    assert replies[0]["agent"] == "test" and replies[0]["conversationId"] == "c1"
    await async_wait_until(lambda: not any(home.processing.rglob("*.json")))
    assert list(home.incoming.iterdir()) == []


async def test_messages_of_one_conversation_run_in_order_while_others_run_concurrently(make_harness) -> None:
    gate = asyncio.Event()

    async def slow_for_a(message: IncomingPayload) -> str:
        if message.conversationId == "A":
            await gate.wait()
        return message.message

    handler = ScriptedHandler(slow_for_a)
    harness = await make_harness(handler)
    for i in range(3):
        harness.drop(make_incoming(f"A{i}", conversationId="A", messageId=f"a{i}"), f"0{i}-a.json")
    for i in range(3):
        harness.drop(make_incoming(f"B{i}", conversationId="B", messageId=f"b{i}"), f"1{i}-b.json")
    await async_wait_until(lambda: len(harness.replies()) == 3)
    assert sorted(r["message"] for r in harness.replies()) == ["B0", "B1", "B2"]
    assert [m for kind, m in handler.log if kind == "start" and m.startswith("A")] == ["A0"]
    gate.set()
    await async_wait_until(lambda: len(harness.replies()) == 6)
    a_events = [(kind, m) for kind, m in handler.log if m.startswith("A")]
    assert a_events == [("start", "A0"), ("end", "A0"), ("start", "A1"), ("end", "A1"),
                        ("start", "A2"), ("end", "A2")]


async def test_concurrency_is_capped(make_harness) -> None:
    release = asyncio.Event()

    async def wait(message: IncomingPayload) -> str:
        await release.wait()
        return "ok"

    handler = ScriptedHandler(wait)
    harness = await make_harness(handler, max_concurrency=2)
    for i in range(5):
        harness.drop(make_incoming(conversationId=f"c{i}", messageId=f"m{i}"), f"{i}.json")
    await async_wait_until(lambda: handler.active == 2)
    release.set()
    await async_wait_until(lambda: len(harness.replies()) == 5)
    assert handler.peak == 2


async def test_a_failure_is_retried_with_events_and_then_succeeds(make_harness, home: Home) -> None:
    calls = []

    async def flaky(message: IncomingPayload) -> str:
        calls.append(message.message)
        if len(calls) < 3:
            raise RuntimeError("provider exploded")
        return "finally"

    harness = await make_harness(ScriptedHandler(flaky))
    harness.drop(make_incoming("try", messageId="t"), "t.json")
    replies = await async_wait_until(harness.replies)
    assert replies[0]["message"] == "finally" and len(calls) == 3
    names = harness.event_names()
    assert names.count("job.failed.retryable") == 2 and names.count("job.requeued") == 2
    assert list(home.failed.iterdir()) == []


async def test_a_full_disk_under_the_handler_is_waited_out_never_counted_as_an_attempt(
        make_harness, home: Home) -> None:
    calls = []

    async def disk_full_then_fine(message: IncomingPayload) -> str:
        calls.append(message.message)
        if len(calls) <= 3:  # as many refusals as max_attempts: counted, they would make a dead letter
            raise OSError(errno.ENOSPC, "No space left on device")
        return "written at last"

    harness = await make_harness(ScriptedHandler(disk_full_then_fine))
    harness.drop(make_incoming("save", messageId="s"), "s.json")
    replies = await async_wait_until(harness.replies)
    assert replies[0]["message"] == "written at last" and len(calls) == 4
    errors = [e for e in read_events(home.events_file) if e["event"] == "queue.error"]
    assert [e["failures"] for e in errors] == [1, 2, 3] and "No space left" in errors[0]["reason"]
    assert "job.failed.retryable" not in harness.event_names() and list(home.failed.iterdir()) == []


async def test_retry_keeps_the_conversation_order(make_harness) -> None:
    failed_once: set[str] = set()

    async def first_fails_once(message: IncomingPayload) -> str:
        if message.message == "first" and "first" not in failed_once:
            failed_once.add("first")
            raise RuntimeError("transient")
        return message.message

    handler = ScriptedHandler(first_fails_once)
    harness = await make_harness(handler)
    harness.drop(make_incoming("first", messageId="1"), "1.json")
    harness.drop(make_incoming("second", messageId="2"), "2.json")
    await async_wait_until(lambda: len(harness.replies()) == 2)
    successes = [m for kind, m in handler.log if kind == "end"]
    assert successes == ["first", "first", "second"]


async def test_dead_letter_after_max_attempts_keeps_bytes_and_apologises(make_harness, home: Home) -> None:
    async def always_fails(message: IncomingPayload) -> str:
        raise RuntimeError("still broken")

    harness = await make_harness(ScriptedHandler(always_fails))
    payload = make_incoming("doomed", messageId="d")
    raw = payload.to_json()
    harness.drop(raw, "d.json")
    await async_wait_until(lambda: (home.failed / "d.json.error.json").exists())
    assert (home.failed / "d.json").read_bytes() == raw
    report = json.loads((home.failed / "d.json.error.json").read_bytes())
    assert report["attempts"] == 3 and "still broken" in report["reason"] and len(report["errors"]) == 3
    apology = (await async_wait_until(harness.replies))[0]
    assert apology["messageId"] == "d" and "Sorry" in apology["message"]
    assert "job.failed.final" in harness.event_names()


async def test_permanent_error_dead_letters_at_once(make_harness, home: Home) -> None:
    async def refuses(message: IncomingPayload) -> str:
        raise PermanentError("unknown provider 'nope'")

    harness = await make_harness(ScriptedHandler(refuses))
    harness.drop(make_incoming(messageId="p"), "p.json")
    await async_wait_until(lambda: (home.failed / "p.json.error.json").exists())
    assert json.loads((home.failed / "p.json.error.json").read_bytes())["attempts"] == 1


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "not a JSON object"),
        (json.dumps({"channel": "console", "message": "no id"}).encode(), "wrong schema"),
        (json.dumps({"channel": "console", "message": "x" * 5000, "timestamp": 1, "messageId": "big"}).encode(),
         "larger than queue.max_payload_bytes"),
    ],
)
async def test_invalid_payloads_are_quarantined_and_the_worker_goes_on(
    make_harness, home: Home, content: bytes, reason: str
) -> None:
    harness = await make_harness(max_payload_bytes=4096)
    harness.drop(content, "bad.json")
    harness.drop(make_incoming("after", messageId="ok"), "ok.json")
    await async_wait_until(lambda: (home.failed / "bad.json.error.json").exists())
    assert (home.failed / "bad.json").read_bytes() == content
    assert reason in json.loads((home.failed / "bad.json.error.json").read_bytes())["reason"]
    replies = await async_wait_until(harness.replies)
    assert replies[0]["message"] == "echo: after"
    assert "message.invalid" in harness.event_names()


def unstorable_payload(field: str, value: object) -> bytes:
    """A payload of conversation c1 whose `field` is `value` (JSON spells NUL `\\u0000`, a lone surrogate
    `\\ud800`)."""
    body = {"channel": "console", "channelProfileId": "console", "sender": "Ada", "senderId": "u1",
            "message": "hello", "timestamp": 1, "messageId": "bad", "conversationId": "c1", field: value}
    return json.dumps(body).encode()


# (field, value, what the dead letter's reason says, whether the sender can be told): the same cases on
# the postgres backend (tests/backends/postgres/test_queue.py), which must treat them alike
UNSTORABLE = [
    ("message", "a\x00b", "message contains a NUL character", True),
    ("sender", "Ada\x00", "sender contains a NUL character", True),
    ("note", {"deep": ["x\x00"]}, "note.deep[0] contains a NUL character", True),
    ("k\x00ey", 1, 'a key ("k\ufffdey") contains a NUL character', True),
    ("conversationId", "c\x00", "conversationId contains a NUL character; no apology sent", False),
    ("messageId", "m\x00", "messageId contains a NUL character", True),
    ("message", "a\ud800b", "message contains a lone surrogate (\\ud800)", True),
    ("conversationId", "c\ud800", "conversationId contains a lone surrogate (\\ud800)", False),
]
UNSTORABLE_IDS = ["nul-text", "nul-sender", "nul-extra", "nul-key", "nul-conversation", "nul-message-id",
                  "surrogate-text", "surrogate-conversation"]


@pytest.mark.parametrize(("field", "value", "reason", "told"), UNSTORABLE, ids=UNSTORABLE_IDS)
async def test_text_no_store_can_hold_is_invalid_input_and_the_sender_is_told(
    make_harness, home: Home, field: str, value: object, reason: str, told: bool
) -> None:
    harness = await make_harness()
    content = unstorable_payload(field, value)
    harness.drop(content, "bad.json")
    harness.drop(make_incoming("after", messageId="same", conversationId="c1"), "same.json")
    harness.drop(make_incoming("other", messageId="other", conversationId="c2"), "other.json")
    await async_wait_until(lambda: len(harness.replies()) == (3 if told else 2))
    assert (home.failed / "bad.json").read_bytes() == content
    assert reason in json.loads((home.failed / "bad.json.error.json").read_bytes())["reason"]
    texts = {r["message"] for r in harness.replies()}
    assert {"echo: after", "echo: other"} <= texts
    apologies = [r for r in harness.replies() if r["message"].startswith("Sorry, I could not take in")]
    assert [(a["conversationId"], reason in a["message"]) for a in apologies] == ([("c1", True)] if told else [])
    assert "message.invalid" in harness.event_names() and not any(home.processing.rglob("*.json"))


async def test_an_answer_holding_text_no_store_can_hold_is_written_made_safe(make_harness, home: Home) -> None:
    """A provider's NUL or lone surrogate becomes U+FFFD in the reply (before: a surrogate failed the write,
    and the message stayed claimed, holding its conversation)."""
    async def garbled(message: IncomingPayload) -> str:
        return "ok \x00 and \ud800" if message.messageId == "g" else "fine"

    harness = await make_harness(ScriptedHandler(garbled))
    harness.drop(make_incoming("hi", messageId="g", conversationId="c1"), "g.json")
    harness.drop(make_incoming("then", messageId="n", conversationId="c1"), "n.json")
    replies = await async_wait_until(lambda: len(harness.replies()) == 2 and harness.replies())
    assert sorted(r["message"] for r in replies) == ["fine", "ok \ufffd and \ufffd"]
    assert not any(home.processing.rglob("*.json")) and not any(home.failed.iterdir())


async def test_a_repeated_message_already_answered_is_skipped(make_harness) -> None:
    handler = ScriptedHandler()
    harness = await make_harness(handler)
    harness.drop(make_incoming("once", messageId="same"), "1.json")
    await async_wait_until(harness.replies)
    harness.drop(make_incoming("once", messageId="same"), "2.json")
    await async_wait_until(lambda: "message.duplicate" in harness.event_names())
    assert len(harness.replies()) == 1 and handler.log.count(("start", "once")) == 1


class AnsweredElsewhere:
    """A store_answer that finds the message answered already by another handle (whose host this one took
    for dead): it stores nothing, as PgAnswering does then, and the claimed file goes as that handle's did."""

    def __init__(self, queue: FileQueue):
        self.queue = queue

    def __call__(self, claimed, message: IncomingPayload, replies: list[OutgoingPayload]) -> bool:
        self.queue.complete(claimed)
        return False


def run_result(message: IncomingPayload, state: str = "done") -> OutgoingPayload:
    return OutgoingPayload.reply_to(message, "the run's answer", agent="helper", timestamp=message.timestamp,
                                    workflowRunId="r-1", runState=state)


class ResultHandler(ScriptedHandler):
    """Answers with a note and the result of a run the message waited for (as orchestrator/chat/actions.py)."""

    async def handle(self, message: IncomingPayload) -> list[OutgoingPayload]:
        return [OutgoingPayload.reply_to(message, "a note", agent="test", timestamp=message.timestamp),
                run_result(message)]


async def test_a_run_result_in_an_answer_stored_elsewhere_first_is_still_sent_once(make_harness) -> None:
    """The other handle's answer may be the ack that promises the result, which the run handed to this
    answer: dropped with it, the result would reach nobody (seen with two hosts and connections ended)."""
    harness = await make_harness(ResultHandler(), store_answer=AnsweredElsewhere)
    harness.drop(make_incoming("hi", messageId="m1"), "m1.json")
    await async_wait_until(harness.replies)
    assert [(r["message"], r.get("runState")) for r in harness.replies()] == [("the run's answer", "done")]


async def test_a_run_result_the_outbox_holds_already_is_not_sent_again(make_harness) -> None:
    harness = await make_harness(ResultHandler(), store_answer=AnsweredElsewhere)
    message = make_incoming("hi", messageId="m1")
    harness.outbox.write(run_result(message))  # the other handle's answer was the result
    harness.drop(message, "m1.json")
    await async_wait_until(lambda: not any(harness.home.incoming.iterdir()) and not any(
        harness.home.processing.rglob("*.json")) and harness.worker.stats()["running"] == 0)
    assert [(r["message"], r.get("runState")) for r in harness.replies()] == [("the run's answer", "done")]


def test_backoff_doubles_and_is_capped() -> None:
    settings = QueueSettings(backoff_initial_ms=500, backoff_max_ms=1500)
    assert [backoff_seconds(n, settings) for n in (1, 2, 3, 4)] == [0.5, 1.0, 1.5, 1.5]


async def test_stop_requeues_claimed_messages_that_had_not_started(make_harness, home: Home) -> None:
    release = asyncio.Event()

    async def hang(message: IncomingPayload) -> str:
        await release.wait()
        return "late"

    harness = await make_harness(ScriptedHandler(hang), max_concurrency=1)
    harness.drop(make_incoming("a", messageId="a", conversationId="x"), "a.json")
    harness.drop(make_incoming("b", messageId="b", conversationId="x"), "b.json")
    await async_wait_until(lambda: harness.worker.scheduler.running == 1)
    await harness.worker.stop(0.05)
    assert sorted(p.name for p in home.incoming.iterdir()) == ["a.json", "b.json"]


def _fifo(home: Home, outside: Path) -> str:
    os.mkfifo(outside / "fifo")
    os.rename(outside / "fifo", home.incoming / "bad.json")  # renamed in, as a writer would
    return "not a regular file: a FIFO"


def _link_to_payload_outside(home: Home, outside: Path) -> str:
    target = outside / "elsewhere.json"
    target.write_bytes(make_incoming("from outside", messageId="outside").to_json())
    os.symlink(target, home.incoming / "bad.json")
    return "a symbolic link"


def _link_to_passwd(home: Home, outside: Path) -> str:
    os.symlink("/etc/passwd", home.incoming / "bad.json")
    return "a symbolic link"


def _directory(home: Home, outside: Path) -> str:
    (home.incoming / "bad.json").mkdir()
    return "not a regular file: a directory"


@pytest.mark.parametrize("make_bad", [_fifo, _link_to_payload_outside, _link_to_passwd, _directory])
async def test_anything_but_a_regular_file_is_quarantined_unread_and_the_worker_goes_on(
    make_harness, home: Home, tmp_path: Path, make_bad: Callable[[Home, Path], str]
) -> None:
    harness = await make_harness()
    reason = make_bad(home, tmp_path)
    harness.queue.notice("bad.json")
    harness.drop(make_incoming("after", messageId="ok"), "ok.json")
    await async_wait_until(lambda: (home.failed / "bad.json.error.json").exists())
    assert reason in json.loads((home.failed / "bad.json.error.json").read_bytes())["reason"]
    assert os.path.lexists(home.failed / "bad.json") and not os.path.lexists(home.incoming / "bad.json")
    replies = await async_wait_until(harness.replies)
    assert [r["message"] for r in replies] == ["echo: after"]  # the payload behind a link is never answered
    invalid = [e for e in read_events(home.events_file) if e["event"] == "message.invalid"]
    assert [e["job_id"] for e in invalid] == ["bad.json"]
    assert not any(home.processing.rglob("*.json"))


DEEP = b"[" * 100_000
DEEP_INSIDE = make_incoming("deep", messageId="deep").to_json()[:-1] + b', "x": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"


@pytest.mark.parametrize("content", [DEEP, DEEP_INSIDE], ids=["deep-array", "deep-inside-a-payload"])
async def test_a_deeply_nested_payload_is_invalid_input_not_a_poisoned_queue(
    make_harness, home: Home, content: bytes
) -> None:
    harness = await make_harness()
    harness.drop(content, "deep.json")
    harness.drop(make_incoming("after", messageId="ok"), "ok.json")
    await async_wait_until(lambda: (home.failed / "deep.json.error.json").exists())
    assert (home.failed / "deep.json").read_bytes() == content
    assert "not valid JSON" in json.loads((home.failed / "deep.json.error.json").read_bytes())["reason"]
    replies = await async_wait_until(harness.replies)
    assert [r["message"] for r in replies] == ["echo: after"]
    assert not any(home.processing.rglob("*.json"))
    assert "queue.error" not in harness.event_names()


async def test_a_clock_step_backwards_keeps_a_conversations_intake_order(
    make_harness, home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = asyncio.Event()

    async def first_waits(message: IncomingPayload) -> str:
        if message.message == "block":
            await gate.wait()
        return message.message

    handler = ScriptedHandler(first_waits)
    harness = await make_harness(handler, max_concurrency=1)
    harness.drop(make_incoming("block", messageId="b", conversationId="other"), "0-block.json")
    await async_wait_until(lambda: handler.active == 1)  # the two below are indexed before either is claimed
    now = time.time_ns()
    for text, clock in (("first", now), ("second", now - 60_000_000_000)):  # the clock steps back a minute
        monkeypatch.setattr(queue_module.time, "time_ns", lambda clock=clock: clock)
        path = harness.queue.enqueue(make_incoming(text, messageId=text).to_json(), hint="console-c1")
        os.utime(path, ns=(clock, clock))  # the file system's clock stepped back too
        harness.queue.notice(path.name)
    monkeypatch.undo()
    gate.set()
    await async_wait_until(lambda: len(harness.replies()) == 3)
    assert [m for kind, m in handler.log if kind == "start"] == ["block", "first", "second"]


async def test_a_message_waiting_behind_its_conversation_gets_one_receipt_and_a_quick_one_none(
    make_harness, home: Home
) -> None:
    gate = asyncio.Event()

    async def held(message: IncomingPayload) -> str:
        if message.message == "slow":
            await gate.wait()
        return message.message

    harness = await make_harness(ScriptedHandler(held), receipt_after_sec=0.2,
                                 wants_receipt=lambda message: message.conversationId != "machine")
    harness.drop(make_incoming("slow", conversationId="A", messageId="a0"), "00-a.json")
    harness.drop(make_incoming("second", conversationId="A", messageId="a1"), "01-a.json")
    harness.drop(make_incoming("third", conversationId="A", messageId="a2"), "02-a.json")
    harness.drop(make_incoming("other", conversationId="B", messageId="b0"), "03-b.json")
    receipts = await async_wait_until(lambda: [r for r in harness.replies() if r.get("receipt")]
                                      if len([r for r in harness.replies() if r.get("receipt")]) == 2 else None)
    assert sorted((r["messageId"], r["message"].split(" of ")[0]) for r in receipts) == [
        ("a1", "queued behind 1 message"), ("a2", "queued behind 2 messages")]
    gate.set()
    await async_wait_until(lambda: len([r for r in harness.replies() if not r.get("receipt")]) == 4)
    assert [r["messageId"] for r in harness.replies() if r.get("receipt")] in (["a1", "a2"], ["a2", "a1"])
    assert "message.queued_receipt" in harness.event_names()
