"""Edits on the postgres backend, through its intake and worker (issue 23 §3): an edit of a message whose row
still waits replaces its text (the worker runs it once, edited); one of a message already answered is stored
as its own message with `editOf`."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest

from gateway.models import IncomingPayload, OutgoingPayload
from tests.backends.postgres.test_queue import ScriptedHandler, message, rig_factory  # noqa: F401, F811  (the fixture)

pytestmark = pytest.mark.timeout(60)


@dataclass
class TextHandler(ScriptedHandler):
    """A ScriptedHandler that also records the text and editOf of each message it ran."""

    texts: list[tuple[str, str, str | None]] = field(default_factory=list)

    async def handle(self, msg: IncomingPayload) -> list[OutgoingPayload]:
        self.texts.append((msg.messageId, msg.message, msg.editOf))
        return await super().handle(msg)


def edit_of(original: IncomingPayload, text: str, n: int = 1) -> IncomingPayload:
    return original.model_copy(update={"message": text, "messageId": f"{original.messageId}:e{n}",
                                       "editOf": original.messageId})


async def test_an_edit_of_a_waiting_row_replaces_it_and_one_of_an_answered_row_follows_it(rig_factory: Any) -> None:  # noqa: F811
    handler = TextHandler(delay_s=0.5)
    rig = await rig_factory(handler, max_concurrency=2)
    first, second = message(1, "c"), message(2, "c", text="helo")
    rig.drop(first)
    rig.drop(second)  # waits behind the first, which runs half a second
    await rig.until(lambda: handler.running == 1)
    rig.drop(edit_of(second, "hello"))
    await rig.until(lambda: len(rig.replies()) == 2)
    assert [(mid, text) for mid, text, _ in handler.texts] == [("c-00001", "hello 1"), ("c-00002", "hello")], \
        "the waiting message ran once, with the edit's text; the edit was no message of its own"
    assert rig.rows("SELECT count(*) FROM switchyard_messages") == [(2,)]
    rig.drop(edit_of(first, "hello one, edited"))  # answered already: queued as its own message
    await rig.until(lambda: len(rig.replies()) == 3)
    assert handler.texts[-1] == ("c-00001:e1", "hello one, edited", "c-00001")


async def test_an_edit_folded_between_the_workers_read_and_its_start_is_what_runs(
    rig_factory: Any, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    """A row stored without its identity (before migration 0080) is read, then started with `UPDATE … WHERE
    state = 'queued'`: an edit folded in between is what the worker runs (the start statement returns the
    payload it started), never the text read before."""
    from gateway.backends.postgres.edits import PgEdits
    from gateway.backends.postgres.processing import MessageProcessor

    monkeypatch.setattr("gateway.backends.postgres.intake.message_identity", lambda message: None)  # as before 0080
    original = message(1, "c", text="helo")
    start = MessageProcessor._answered_or_start
    folded: list[bool] = []

    async def edit_then_start(self: MessageProcessor, message_id: int, msg: IncomingPayload) -> Any:
        if msg.messageId == original.messageId and not folded:
            from psycopg_pool import ConnectionPool

            with ConnectionPool(rig.dsn, min_size=1, max_size=1) as pool:
                folded.append(PgEdits(pool).fold_edit(edit_of(original, "hello")))
        return await start(self, message_id, msg)

    monkeypatch.setattr(MessageProcessor, "_answered_or_start", edit_then_start)
    handler = TextHandler()
    rig = await rig_factory(handler)
    rig.drop(original)
    await rig.until(lambda: rig.replies())
    assert folded == [True] and handler.texts == [("c-00001", "hello", None)]


class _HeldOpen:
    """A pool of one connection whose transaction stays open when it is given back (committed by the test)."""

    def __init__(self, conn: psycopg.Connection[Any]):
        self.conn = conn

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        yield self.conn


async def test_an_edit_committed_while_the_worker_starts_its_row_is_what_runs(
    rig_factory: Any, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    """A row stored with its identity is read, checked and started in one statement; an edit whose fold holds
    the row until that statement waits on it is committed first, and the worker runs the edited text (the
    start returns the payload it started), never the text the statement read."""
    from gateway.backends.postgres.edits import PgEdits
    from gateway.backends.postgres.processing import READ_AND_START, MessageProcessor

    original = message(1, "c", text="helo")
    process = MessageProcessor._process
    held: list[psycopg.Connection[Any]] = []
    waiters: list[int] = []

    def commit_once_the_start_waits(conn: psycopg.Connection[Any]) -> None:
        with psycopg.connect(rig.dsn, autocommit=True) as watcher:
            deadline = time.monotonic() + 20
            while not waiters and time.monotonic() < deadline:
                waiters.extend(pid for (pid,) in watcher.execute(
                    "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
                    (READ_AND_START.split("%")[0] + "%",)))  # as sent: its placeholders are $1, $2
        conn.commit()
        conn.close()

    async def edit_held_then_process(self: MessageProcessor, message_id: int) -> None:
        if not held:
            conn = psycopg.connect(rig.dsn)  # its transaction holds the edited row until committed
            held.append(conn)
            assert PgEdits(_HeldOpen(conn)).fold_edit(edit_of(original, "hello"))
            threading.Thread(target=commit_once_the_start_waits, args=(conn,)).start()
        await process(self, message_id)

    monkeypatch.setattr(MessageProcessor, "_process", edit_held_then_process)
    handler = TextHandler()
    rig = await rig_factory(handler)
    rig.drop(original)
    await rig.until(lambda: rig.replies())
    assert waiters, "the worker's start never waited on the row the edit held"
    assert handler.texts == [("c-00001", "hello", None)]


async def test_a_message_waiting_for_its_conversation_stays_queued_and_takes_its_edit(rig_factory: Any) -> None:  # noqa: F811
    """A message naming a run holds two keys: its process job (the run's key) looks at it while the gate job
    still waits for its busy conversation. Looking does not start it: the row stays queued, so an edit sent
    meanwhile is folded in and what runs is the edited text, once."""
    release = asyncio.Event()
    handler = HeldHandler(release=release)
    rig = await rig_factory(handler, max_concurrency=4)
    rig.drop(message(1, "a"))  # holds conversation a until released
    await rig.until(lambda: handler.running == 1)
    waiting = message(2, "a", text="helo", workflowRunId="r1")
    rig.drop(waiting)
    tried = ("SELECT count(*) FROM procrastinate_jobs j JOIN switchyard_messages m "
             "ON m.id = (j.args->>'message_id')::bigint WHERE m.name = '0000002.json' "
             "AND j.args->>'role' = 'process' AND j.attempts > 0")
    await rig.until(lambda: rig.rows(tried) == [(1,)])  # its process job ran, and parked
    assert rig.rows("SELECT state FROM switchyard_messages WHERE name = '0000002.json'") == [("queued",)]
    rig.drop(edit_of(waiting, "hello"))
    text = "SELECT convert_from(payload, 'UTF8')::jsonb->>'message' FROM switchyard_messages WHERE name = %s"
    await rig.until(lambda: rig.rows(text, "0000002.json") == [("hello",)])  # folded into the waiting row
    release.set()
    await rig.until(lambda: len(rig.replies()) == 2)
    assert [text for _, text, _ in handler.texts] == ["hello 1", "hello"]


@dataclass
class HeldHandler(TextHandler):
    """A TextHandler whose first message runs until `release` is set."""

    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, msg: IncomingPayload) -> list[OutgoingPayload]:
        if msg.messageId == "a-00001":
            self.running += 1
            try:
                await self.release.wait()
            finally:
                self.running -= 1
        return await super().handle(msg)
