""""Queued" receipts on the postgres backend (gateway/backends/postgres/receipts.py): sent by the owner of a chat
profile
for a message waiting behind its conversation, once, never for one already started, never twice
across processes.

The receipts are read from switchyard_outbox (`payload.receipt`), where the delivery takes them.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from gateway.backends.postgres.outbox import PgOutbox
from gateway.backends.postgres.receipts import PgReceipts
from gateway.home import Home
from gateway.settings import QueueSettings
from gateway.telemetry.events import EventLog
from gateway.testing import wait_until
from tests.backends.postgres.helpers import insert_message, payload, rows
from tests.backends.postgres.test_workers import PgProcess
from tests.faults.harness import message

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

CHAT = {"id": "chat", "type": "chat"}
PROBE = {"id": "probe", "type": "probe"}


def chat_run(root: Path, dsn: str, log: Path, *, slow_s: float, receipt_after_sec: float = 0.5) -> PgProcess:
    """A `switchyard run` owning the `chat` and `probe` profiles, answering each message in `slow_s`."""
    run = PgProcess(root, dsn, log, role="run", slow_s=slow_s)
    run.env["SWITCHYARD_PLUGINS"] = "tests.backends.postgres.chatchannel"
    run.setup(receipt_after_sec=receipt_after_sec)
    loaded = yaml.safe_load(run.home.settings_file.read_text())
    loaded["channels"] = [CHAT, PROBE]
    run.home.settings_file.write_text(yaml.safe_dump(loaded))
    return run


def chat(seq: int, conversation: str, profile: str = "chat") -> Any:
    return message(seq, conversation, channel=profile, channelProfileId=profile)


def outbox(dsn: str) -> list[tuple[int, str, bool, str]]:
    """(id, messageId, is a receipt, text) of every row of switchyard_outbox, in id order."""
    return [(row[0], row[1], row[2] == "true", row[3]) for row in rows(
        dsn, "SELECT id, payload->>'messageId', coalesce(payload->>'receipt', 'false'), payload->>'message' "
             "FROM switchyard_outbox ORDER BY id")]


def receipts(dsn: str) -> list[tuple[str, str]]:
    return [(message_id, text) for _, message_id, receipt, text in outbox(dsn) if receipt]


def answers(dsn: str) -> list[str]:
    return [message_id for _, message_id, receipt, _ in outbox(dsn) if not receipt]


def test_a_message_waiting_behind_its_conversation_gets_one_receipt_before_its_answer(
        tmp_path: Path, db: str) -> None:
    run = chat_run(tmp_path / "a", db, tmp_path / "calls.jsonl", slow_s=2.0)
    run.start()
    first, second, alone = chat(1, "c1"), chat(2, "c1"), chat(3, "c2")
    probe_first, probe_second = chat(4, "p1", "probe"), chat(5, "p1", "probe")
    for sent in (first, second, alone, probe_first, probe_second):
        run.drop(sent)
    wait_until(lambda: len(answers(db)) == 5, 60)
    assert run.stop() == 0
    [(receipted, text)] = receipts(db)  # not the first, not the one alone, not the probe's (no receipts)
    assert receipted == second.messageId
    assert text == "queued behind 1 message of this conversation; I'll answer in turn"
    order = [(message_id, receipt) for _, message_id, receipt, _ in outbox(db) if message_id == second.messageId]
    assert order == [(second.messageId, True), (second.messageId, False)], "the receipt comes before the answer"
    assert [e["messageId"] for e in run.events("message.queued_receipt")] == [second.messageId]


def test_a_new_owner_of_the_profile_does_not_send_a_receipt_again(tmp_path: Path, db: str) -> None:
    log = tmp_path / "calls.jsonl"
    owner = chat_run(tmp_path / "a", db, log, slow_s=4.0, receipt_after_sec=0.3)
    owner.start()
    standby = chat_run(tmp_path / "b", db, log, slow_s=4.0, receipt_after_sec=0.3)
    standby.start()
    first, second = chat(1, "c1"), chat(2, "c1")
    owner.drop(first)
    owner.drop(second)
    wait_until(lambda: receipts(db), 30)
    owner.kill()  # mid-way through the first message: the standby takes the profile and the message over
    wait_until(lambda: len(answers(db)) == 2, 90)
    assert standby.events("channel.lease_taken"), "the standby became the owner"
    assert [message_id for message_id, _ in receipts(db)] == [second.messageId]
    assert standby.stop() == 0


# --- the transaction's guards, with two senders on one database --------------------------------------


@pytest.fixture
def sender(db: str, tmp_path: Path) -> Any:
    made: list[PgReceipts] = []

    def make() -> PgReceipts:
        home = Home(tmp_path / f"home-{len(made)}")
        home.create()
        events = EventLog(home.events_file)
        outbox = PgOutbox(home, events, dsn=db)
        made.append(PgReceipts(db, outbox, events, QueueSettings(receipt_after_sec=0.01), profiles=list))
        return made[-1]

    yield make
    for receipts in made:
        receipts.outbox.pool.close()


def waiting(dsn: str, conversations: int, per_conversation: int) -> list[int]:
    """Messages due for a receipt: the first of each conversation running, the others queued behind it."""
    ids = []
    with psycopg.connect(dsn) as conn:
        for seq in range(per_conversation):
            for c in range(conversations):
                key = f"conv:console/console/c{c}"
                ids.append(insert_message(conn, f"m{c}-{seq}.json", payload(f"m{c}-{seq}", f"c{c}"), keys=(key,),
                                          state="running" if seq == 0 else "queued"))
        conn.execute("UPDATE switchyard_messages SET enqueued_at = now() - interval '1 minute'")
    return ids


def test_two_senders_at_once_write_one_receipt_per_message(db: str, sender: Any) -> None:
    waiting(db, conversations=40, per_conversation=3)
    senders = [sender(), sender()]
    start = threading.Barrier(2)
    sent: list[list[str]] = [[], []]

    def sweep(index: int) -> None:
        start.wait()
        for _ in range(3):
            sent[index] += [m.messageId for m, _ in senders[index].send_due(["console"])]

    threads = [threading.Thread(target=sweep, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    written = [message_id for message_id, _ in receipts(db)]
    assert len(written) == 80 and len(set(written)) == 80, "one receipt for each waiting message"
    assert sorted(sent[0] + sent[1]) == sorted(written)
    stamped = rows(db, "SELECT count(*) FROM switchyard_messages WHERE receipt_at IS NOT NULL")
    assert stamped == [(80,)]


def test_no_receipt_for_a_message_whose_start_is_being_committed(db: str, sender: Any) -> None:
    ids = waiting(db, conversations=1, per_conversation=2)
    with psycopg.connect(db) as worker:  # the worker marks it running; its transaction is not committed yet
        worker.execute("UPDATE switchyard_messages SET state = 'running' WHERE id = %s", (ids[1],))
        assert sender().send_due(["console"]) == []
    assert sender().send_due(["console"]) == []
    assert receipts(db) == []


def test_no_receipt_for_a_message_with_nothing_ahead_of_it(db: str, sender: Any) -> None:
    with psycopg.connect(db) as conn:  # due, but only waiting for a free worker or its own backoff
        insert_message(conn, "done.json", payload("done"), state="done")
        insert_message(conn, "head.json", payload("head"))
        insert_message(conn, "other.json", payload("other", "c2"), keys=("conv:console/console/c2",))
        conn.execute("UPDATE switchyard_messages SET enqueued_at = now() - interval '1 minute'")
    assert sender().send_due(["console"]) == []
    assert receipts(db) == []
