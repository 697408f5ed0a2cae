"""gateway/backends/memory/queue.py: an edit folded into the first of two waiting messages of one conversation
keeps that message in its place in the shared line; it is claimed first, with the edited text, then the second,
whichever handle claims."""

from __future__ import annotations

import json

from gateway.backends.memory.queue import MemoryQueue, QueueState
from gateway.models import IncomingPayload
from gateway.testing import make_incoming


def _message(text: str, message_id: str, **fields: str) -> IncomingPayload:
    return make_incoming(text, messageId=message_id, conversationId="c1", senderId="ada", **fields)


def _claimed_texts(queue: MemoryQueue) -> list[tuple[str, str]]:
    """(messageId, text) of every message the handle claims, in claim order; each is completed at once."""
    taken = []
    while (claimed := queue.claim()) is not None:
        taken.append(json.loads(claimed.data))
        queue.complete(claimed)
    return [(body["messageId"], body["message"]) for body in taken]


def test_the_edited_first_message_is_still_claimed_first_with_its_new_text() -> None:
    state = QueueState()
    host, other_host = MemoryQueue(state, worker="w1"), MemoryQueue(state, worker="w2")
    host.open()
    other_host.open()
    for payload in (_message("first", "a1"), _message("second", "b1")):
        host.enqueue(payload.to_json(), hint=f"{payload.channel}-{payload.messageId}",
                     identity=f"{payload.channel}/{payload.messageId}")
    assert host.fold_edit(_message("first, edited", "a1-edit", editOf="a1")), "the edit was not folded"
    assert _claimed_texts(other_host) == [("a1", "first, edited"), ("b1", "second")]
