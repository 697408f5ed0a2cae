"""Edits of waiting messages (gateway.stores.EditFolding), written once for every backend: an edit of a
message still waiting replaces its text in place; one of a message already taken is not folded (the caller
queues it); and an edit racing a claim ends in exactly one of the two, never both, never neither."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from gateway.channelkit.edits import to_queue
from gateway.models import IncomingPayload
from gateway.stores import EditFolding, QueueStore
from tests.contract.backends import Backend

RACES = 40


def original(n: int = 1, text: str = "helo", sender: str | None = None) -> bytes:
    return json.dumps({"channel": "console", "message": f"{text} {n}", "timestamp": 1, "messageId": f"m{n}",
                       "conversationId": "c1", **({"senderId": sender} if sender else {})}).encode()


def edit(n: int = 1, text: str = "hello", of: str | None = None, sender: str = "") -> IncomingPayload:
    return IncomingPayload(channel="console", message=f"{text} {n}", timestamp=2, messageId=f"m{n}:e1",
                           editOf=of or f"m{n}", conversationId="c1", senderId=sender)


class Line:
    """One backend's waiting line, as the contract needs it: take a message in, claim the oldest (the text
    of what was claimed, None when nothing was), and a second handle that folds edits."""

    def __init__(self, backend: Backend):
        self.backend = backend
        self.pool: Any = None
        if backend.name == "postgres":
            from psycopg_pool import ConnectionPool

            from gateway.backends.postgres.edits import PgEdits

            self.pool = ConnectionPool(backend.dsn, min_size=2, max_size=4, open=True)  # type: ignore[attr-defined]
            self.folding: EditFolding = PgEdits(self.pool)
        self.claimer: QueueStore = backend.queue("claimer")
        self.claimer.open()
        if self.pool is None:
            folder = backend.queue("folder")
            folder.open()
            assert isinstance(folder, EditFolding)
            self.folding = folder

    def take_in(self, data: bytes) -> None:
        if self.pool is not None:
            from tests.backends.postgres.helpers import insert_message

            with self.pool.connection() as conn:
                insert_message(conn, f"{json.loads(data)['messageId']}.json", data)
            return
        self.claimer.enqueue(data, hint=f"console-{json.loads(data)['messageId']}")
        self.claimer.rescan()

    def claim(self) -> str | None:
        """The text of the oldest waiting message, now taken; None when none could be taken."""
        claimed = self.claim_payload()
        return None if claimed is None else str(claimed["message"])

    def claim_payload(self) -> dict[str, Any] | None:
        """The oldest waiting message, now taken; None when none could be taken."""
        claimed = self.claimer.claim()
        if claimed is None:
            return None
        data = self.claimer.start(claimed)  # as the Worker starts it: what it runs from then on
        self.claimer.complete(claimed)
        return None if data is None else dict(json.loads(data))

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()


@contextmanager
def line_of(backend: Backend) -> Iterator[Line]:
    line = Line(backend)
    try:
        yield line
    finally:
        line.close()


def at_once(work: dict[str, Callable[[], Any]]) -> dict[str, Any]:
    """Runs each callable in a thread of its own, released together; their results by name."""
    barrier = threading.Barrier(len(work))
    result: dict[str, Any] = {}

    def body(name: str, call: Callable[[], Any]) -> None:
        barrier.wait()
        result[name] = call()

    threads = [threading.Thread(target=body, args=item) for item in work.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    return result


def test_an_edit_of_a_waiting_message_replaces_its_text_in_place(backend: Backend) -> None:
    with line_of(backend) as line:
        line.take_in(original(1))
        line.take_in(original(2))
        assert line.folding.fold_edit(edit(2)) is True
        assert line.folding.fold_edit(edit(1)) is True
        assert line.folding.fold_edit(edit(1, "hello again")) is True, "a second edit replaces the first"
        assert [line.claim(), line.claim(), line.claim()] == ["hello again 1", "hello 2", None], \
            "each keeps its place in line, and the edits are no messages of their own"


def test_an_edit_of_a_taken_or_unknown_message_is_not_folded(backend: Backend) -> None:
    with line_of(backend) as line:
        line.take_in(original(1))
        assert line.claim() == "helo 1"
        assert line.folding.fold_edit(edit(1)) is False, "taken: the caller queues the edit as a new message"
        line.take_in(original(2))
        assert line.folding.fold_edit(edit(2, of="m9")) is False, "not the message it edits"
        other = IncomingPayload(channel="console", message="x", timestamp=2, messageId="e", editOf="m2",
                                conversationId="c2")
        assert line.folding.fold_edit(other) is False, "another conversation's message of that id is not it"
        assert line.claim() == "helo 2"


def test_another_senders_edit_is_a_message_of_its_own_from_its_real_sender(backend: Backend) -> None:
    """Issue 32 §5: in a group, an edit carrying 1001's messageId but sent by 1002 is no edit of 1001's message."""
    with line_of(backend) as line:
        line.take_in(original(1, "deploy staging", sender="1001"))
        queued = to_queue(line.folding.fold_edit, edit(1, "deploy PRODUCTION", sender="1002"))
        assert queued is not None, "another sender's edit replaced the waiting message"
        line.take_in(queued.to_json())
        first, second = line.claim_payload(), line.claim_payload()
        assert first is not None and second is not None and line.claim() is None
        assert (first["message"], first.get("senderId")) == ("deploy staging 1", "1001"), "1001's message changed"
        assert (second["message"], second["senderId"], second.get("editOf")) == ("deploy PRODUCTION 1", "1002", None), \
            "processed as a new message of its real sender, no edit of 1001's"


def test_the_same_senders_edit_still_replaces_the_waiting_message(backend: Backend) -> None:
    with line_of(backend) as line:
        line.take_in(original(1, "deploy stagng", sender="1001"))
        assert to_queue(line.folding.fold_edit, edit(1, "deploy staging", sender="1001")) is None, "not folded"
        claimed = line.claim_payload()
        assert claimed is not None and (claimed["message"], claimed["senderId"]) == ("deploy staging 1", "1001")
        assert line.claim() is None, "the edit is no message of its own"


def test_an_edit_racing_a_claim_is_folded_or_not_never_both_never_neither(backend: Backend) -> None:
    outcomes: dict[str, int] = {"folded": 0, "taken first": 0}
    with line_of(backend) as line:
        for n in range(RACES):
            line.take_in(original(n))
            result = at_once({"claimed": line.claim, "folded": lambda n=n: line.folding.fold_edit(edit(n))})
            claimed = result["claimed"]
            if claimed is None:  # the fold held it out of line at that moment: it waits, with the edit
                if backend.name == "files":
                    line.claimer.rescan()
                claimed = line.claim()
            if result["folded"]:
                assert claimed == f"hello {n}", f"race {n}: folded, yet the worker ran the text before the edit"
                outcomes["folded"] += 1
            else:
                assert claimed == f"helo {n}", f"race {n}: not folded, so the worker must have had the original"
                outcomes["taken first"] += 1
            assert line.claim() is None, f"race {n}: a message left behind or doubled"
    assert sum(outcomes.values()) == RACES, outcomes
    print(f"{backend.name}: {outcomes}")


@pytest.fixture(autouse=True)
def _no_pg_leftovers(backend: Backend) -> Iterator[None]:
    yield
    if backend.name == "postgres":
        with psycopg.connect(backend.dsn) as conn:  # type: ignore[attr-defined]
            conn.execute("DELETE FROM switchyard_messages")
