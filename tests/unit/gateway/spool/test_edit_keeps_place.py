"""gateway/spool/edits.py through FileQueue: an edit folded into the first of two waiting messages of one
conversation keeps that message in its place; it is claimed first, with the edited text, and the second after it
(also after a restart, when the new handle orders incoming/ by the files' names, or the mtimes of files another
program dropped)."""

from __future__ import annotations

import json
import os

from gateway.home import Home
from gateway.models import IncomingPayload
from gateway.spool.queue import Claimed, FileQueue
from gateway.testing import drop_incoming, make_incoming


def _message(text: str, message_id: str, **fields: str) -> IncomingPayload:
    return make_incoming(text, messageId=message_id, conversationId="c1", senderId="ada", **fields)


def _enqueue(queue: FileQueue, payload: IncomingPayload) -> str:
    """Queues a payload as the gateway's sink does (gateway/app.py) and indexes it, as its folder watch would."""
    name = queue.enqueue(payload.to_json(), hint=f"{payload.channel}-{payload.messageId}").name
    queue.notice(name)
    return name


def _claimed_texts(queue: FileQueue) -> list[tuple[str, str]]:
    """(messageId, text) of every message the queue gives, in claim order; each is completed at once."""
    taken: list[Claimed] = []
    while (claimed := queue.claim()) is not None:
        taken.append(claimed)
        queue.complete(claimed)
    return [(json.loads(c.data)["messageId"], json.loads(c.data)["message"]) for c in taken]


def _two_waiting_with_the_first_edited(home: Home) -> FileQueue:
    queue = FileQueue(home, fsync=False)
    queue.open()
    _enqueue(queue, _message("first", "a1"))
    _enqueue(queue, _message("second", "b1"))
    assert queue.fold_edit(_message("first, edited", "a1-edit", editOf="a1")), "the edit was not folded"
    queue.rescan()  # whatever the fold left in incoming/ is indexed, as a watch (or its overflow) would
    return queue


def test_the_edited_first_message_is_still_claimed_first_with_its_new_text(home: Home) -> None:
    queue = _two_waiting_with_the_first_edited(home)
    try:
        assert _claimed_texts(queue) == [("a1", "first, edited"), ("b1", "second")]
    finally:
        queue.close()


def test_after_a_restart_the_edited_first_message_is_still_claimed_first(home: Home) -> None:
    _two_waiting_with_the_first_edited(home).close()
    restarted = FileQueue(home, fsync=False)
    restarted.open()
    try:
        assert _claimed_texts(restarted) == [("a1", "first, edited"), ("b1", "second")]
    finally:
        restarted.close()


def test_a_message_another_program_dropped_keeps_its_place_after_a_restart(home: Home) -> None:
    """A file not named by the gateway is placed by its mtime when a queue opens on it: the fold keeps that too."""
    first = drop_incoming(home, _message("first", "a1"), "bridge-a1.json")
    second = drop_incoming(home, _message("second", "b1"), "bridge-b1.json")
    os.utime(first, ns=(1_000_000_000, 1_000_000_000))  # dropped one second apart, long ago
    os.utime(second, ns=(2_000_000_000, 2_000_000_000))
    queue = FileQueue(home, fsync=False)
    queue.open()
    assert queue.fold_edit(_message("first, edited", "a1-edit", editOf="a1")), "the edit was not folded"
    queue.close()
    restarted = FileQueue(home, fsync=False)
    restarted.open()
    try:
        assert _claimed_texts(restarted) == [("a1", "first, edited"), ("b1", "second")]
    finally:
        restarted.close()
