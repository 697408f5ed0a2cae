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
