"""Edits on the postgres backend, through its intake and worker (issue 23 §3): an edit of a message whose row
still waits replaces its text (the worker runs it once, edited); one of a message already answered is stored
as its own message with `editOf`."""

from __future__ import annotations

import asyncio
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


async def test_an_edit_folded_after_the_claim_is_what_the_start_gives(pg_dsn: str) -> None:
    """A row claimed (its holder set) is still queued: an edit folds into it, and the start, `UPDATE … WHERE
    state = 'queued'`, returns the payload as it is then; once started, an edit no longer folds."""
    from psycopg_pool import ConnectionPool

    from gateway.backends.postgres import schema
    from gateway.backends.postgres.db import SharedPool
    from gateway.backends.postgres.edits import PgEdits
    from gateway.backends.postgres.queue import PgQueue

    schema.migrate(pg_dsn)
    original = message(1, "c", text="helo")
    with psycopg.connect(pg_dsn) as conn:
        conn.execute("INSERT INTO switchyard_messages (name, payload, channel, profile, conversation, keys) "
                     "VALUES ('0000001.json', %s, 'console', 'console', 'c', '{}')", (original.to_json(),))
    shared = SharedPool(pg_dsn)
    queue = PgQueue(shared, holder="h1", lease_s=15)
    with ConnectionPool(pg_dsn, min_size=1, max_size=2, open=True) as pool:
        queue.open()
        claimed = queue.claim()
        assert claimed is not None and b"helo" in claimed.data
        assert PgEdits(pool).fold_edit(edit_of(original, "hello")) is True
        started = queue.start(claimed)
        assert started is not None and IncomingPayload.model_validate_json(started).message == "hello"
        assert PgEdits(pool).fold_edit(edit_of(original, "hello again", 2)) is False, "started: not folded"
        queue.close()
    shared.close()


async def test_a_message_waiting_for_its_conversation_stays_queued_and_takes_its_edit(rig_factory: Any) -> None:  # noqa: F811
    """A message naming a run holds two keys: the worker claims it while its conversation is busy (it waits
    behind it there). Claiming does not start it: the row stays queued, so an edit sent meanwhile is folded
    in and what runs is the edited text, once."""
    release = asyncio.Event()
    handler = HeldHandler(release=release)
    rig = await rig_factory(handler, max_concurrency=4)
    rig.drop(message(1, "a"))  # holds conversation a until released
    await rig.until(lambda: handler.running == 1)
    waiting = message(2, "a", text="helo", workflowRunId="r1")
    rig.drop(waiting)
    claimed = "SELECT holder IS NOT NULL FROM switchyard_messages WHERE name = '0000002.json'"
    await rig.until(lambda: rig.rows(claimed) == [(True,)])  # claimed, waiting behind its conversation
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
