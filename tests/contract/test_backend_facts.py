"""What the CLI reads of every backend (gateway/cli/backends.py words it): `status` counts the dead letters
and shows the newest, as many as asked; `send --wait` finds a message's reply, never a draft of it nor a
reply stored before the message was."""

from __future__ import annotations

from gateway.cli.backends import wait_for_reply
from gateway.models import OutgoingPayload
from gateway.testing import make_incoming
from tests.contract.backends import Backend
from tests.contract.test_deadletters import DATA
from tests.contract.test_runs import next_tick


def test_status_counts_every_dead_letter_and_shows_the_newest(backend: Backend) -> None:
    first = backend.make_dead(DATA, "gave up", "c1", hint="first")
    next_tick()
    second = backend.make_dead(DATA, "refused", "c1", hint="second")
    status = backend.opened().status(1)
    assert status.dead_letter_count == 2
    assert [letter.name for letter in status.dead_letters] == [second], (first, second)
    assert status.dead_letters[0].reason == "refused"


def test_only_a_database_backend_names_its_database(backend: Backend) -> None:
    status = backend.opened().status(5)
    assert (status.database is not None) == (backend.opened().dsn is not None)
    assert status.dead_letter_count == 0 and status.dead_letters == []


def test_send_wait_finds_the_reply_not_its_draft(backend: Backend) -> None:
    asked = make_incoming("asked", messageId="m-asked")
    answer = OutgoingPayload.reply_to(asked, "The quick brown fox.", agent="a", timestamp=asked.timestamp + 1)
    draft = OutgoingPayload.reply_to(asked, "The quick", agent="a", timestamp=asked.timestamp,
                                     progressKey="answer:m-asked", draft=True)
    backend.reply_stored("m-asked.json", asked, draft)
    assert wait_for_reply(backend.opened().replies(), asked, "m-asked.json", 0.1) is None, "a draft is no reply"
    backend.reply_stored("m-asked.json", asked, answer)
    found = wait_for_reply(backend.opened().replies(), asked, "m-asked.json", 5.0)
    assert isinstance(found, dict) and found["message"] == "The quick brown fox."


def test_send_wait_takes_no_reply_stored_before_its_message(backend: Backend) -> None:
    earlier = make_incoming("asked before", messageId="m-same")
    backend.reply_stored("m-earlier.json", earlier, OutgoingPayload.reply_to(earlier, "old answer", agent="a",
                                                                              timestamp=earlier.timestamp))
    next_tick()
    again = make_incoming("asked again", messageId="m-same")
    backend.reply_stored("m-again.json", again, OutgoingPayload.reply_to(
        again, "thinking", agent="a", timestamp=again.timestamp, progressKey="answer:m-same", draft=True))
    assert wait_for_reply(backend.opened().replies(), again, "m-again.json", 0.2) is None
