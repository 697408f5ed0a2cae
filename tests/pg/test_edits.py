"""Edits on the postgres backend, through its intake and worker (issue 23 §3): an edit of a message whose row
still waits replaces its text (the worker runs it once, edited); one of a message already answered is stored
as its own message with `editOf`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from gateway.models import IncomingPayload, OutgoingPayload
from tests.pg.test_queue import ScriptedHandler, message, rig_factory  # noqa: F401, F811  (the fixture)

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
    """The worker reads a row, then starts it with `UPDATE … WHERE state = 'queued'`: an edit folded in between
    is what it runs (the start statement returns the payload it started), never the text read before."""
    from gateway.pg.edits import PgEdits
    from gateway.pg.processing import MessageProcessor

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
