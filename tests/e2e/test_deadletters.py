"""`switchyard dead`: a dead letter listed with its reason, retried into an answer, dropped; `status` agrees.

On both queue backends: on postgres `dead` reads and changes the database (gateway/backends/postgres/deadletters.py).
"""

from __future__ import annotations

import json

import pytest

from gateway.testing import drop_incoming, wait_until
from tests.e2e.conftest import Switchyard, both_backends, provider_calls

pytestmark = [pytest.mark.e2e, both_backends]


def _dead_names(switchyard: Switchyard) -> list[str]:
    result = switchyard.cli("dead", "list", "--json")
    assert result.returncode == 0, result.stderr
    return [letter["name"] for letter in json.loads(result.stdout)]


def _status(switchyard: Switchyard) -> dict:
    return json.loads(switchyard.cli("status", "--json").stdout)


def _dead_in_queue(status: dict) -> int:
    """The dead messages `status --json` counts in its queue figures (failed/ files, or dead rows)."""
    return int(status["queue"]["dead" if "dead" in status["queue"] else "failed"])


def test_a_dead_letter_retried_from_the_cli_is_answered_with_fresh_attempts(switchyard: Switchyard,
                                                                             fake_log) -> None:
    switchyard.configure()  # max_attempts 3
    switchyard.start()
    # fails 4 times: 3 attempts dead-letter it; after the retry, attempt 1 fails and attempt 2 answers
    switchyard.send("fail-until 5", messageId="phoenix")
    name = wait_until(lambda: next(iter(_dead_names(switchyard)), None), 30)
    assert "Sorry" in switchyard.reply_to("phoenix")[0]["message"]  # the apology
    listing = switchyard.cli("dead", "list")
    assert name in listing.stdout and "failed 3 time(s)" in listing.stdout
    shown = switchyard.cli("dead", "show", name)
    assert "fail-until 5" in shown.stdout and "attempts: 3" in shown.stdout
    assert _status(switchyard)["dead_letter_count"] == 1
    assert "dead letters: 1" in switchyard.cli("status").stdout

    retried = switchyard.cli("dead", "retry", name)
    assert retried.returncode == 0, retried.stderr
    assert f"retried {name}" in retried.stdout
    answer = switchyard.reply_to("phoenix", count=2, timeout=30)[1]
    assert answer["agent"] == "writer" and "fail-until 5" in answer["message"]
    assert len([c for c in provider_calls(fake_log) if c["kind"] == "fail"]) == 4
    assert _dead_names(switchyard) == []
    status = _status(switchyard)
    assert status["dead_letter_count"] == 0 and status["dead_letters"] == [] and _dead_in_queue(status) == 0
    assert switchyard.dead_letters() == []
    assert "dead letter" not in switchyard.cli("status").stdout


def test_an_invalid_payload_fixed_by_hand_is_answered_after_retry_all(switchyard: Switchyard) -> None:
    switchyard.configure()
    switchyard.start()
    drop_incoming(switchyard.home, b'{"channel": "console", "message": "typo" ', "typo.json")
    wait_until(lambda: _dead_names(switchyard) == ["typo.json"], 20)
    assert "not valid JSON" in switchyard.cli("dead", "list").stdout
    assert any("not valid JSON" in error for error in switchyard.dead_errors("typo.json"))  # every error kept
    fixed = {"channel": "console", "channelProfileId": "console", "sender": "Ada", "senderId": "u1",
             "message": "typo fixed", "timestamp": 1700000000000, "messageId": "fixed", "conversationId": "c9"}
    switchyard.plant_dead_letter("typo.json", json.dumps(fixed).encode())
    result = switchyard.cli("dead", "retry", "--all")
    where = "incoming/" if switchyard.backend == "files" else "queue"
    assert result.returncode == 0 and f"retried typo.json → {where}" in result.stdout
    answer = switchyard.reply_to("fixed")[0]
    assert answer["agent"] == "writer" and "typo fixed" in answer["message"]
    assert _dead_names(switchyard) == [] and switchyard.dead_letters() == []


def test_a_retried_copy_of_an_answered_message_is_not_answered_twice(switchyard: Switchyard) -> None:
    switchyard.configure()
    switchyard.start()
    sent = switchyard.send("only once", messageId="once")
    switchyard.reply_to("once")
    switchyard.plant_dead_letter("copy.json", json.dumps(sent).encode())  # e.g. a duplicate that failed
    assert switchyard.cli("dead", "retry", "copy.json").returncode == 0
    wait_until(lambda: not switchyard.unfinished() and switchyard.events("message.duplicate"), 20)
    assert len(switchyard.replies("once")) == 1
    assert _dead_names(switchyard) == []


def test_unknown_names_exit_1_and_drop_removes_for_good(switchyard: Switchyard) -> None:
    switchyard.configure()
    switchyard.plant_dead_letter("a.json", b"{}")
    switchyard.plant_dead_letter("b.json", b"{}")
    result = switchyard.cli("dead", "retry", "a.json", "ghost.json")
    assert result.returncode == 1 and "ghost.json" in result.stderr
    assert switchyard.cli("dead", "show", "ghost.json").returncode == 1
    assert sorted(_dead_names(switchyard)) == ["a.json", "b.json"]  # nothing moved
    assert switchyard.cli("dead", "drop", "a.json").stdout.strip() == "dropped a.json"
    assert _dead_names(switchyard) == ["b.json"]
    assert switchyard.cli("dead", "list").stdout.splitlines()[0].split()[:2] == ["NAME", "KIND"]


def test_a_payload_quarantined_for_its_size_is_listed_shown_retried_and_dropped(switchyard: Switchyard) -> None:
    # on postgres the intake never stores such a file: it stays in this host's failed/, and `dead` still sees it
    switchyard.configure({"queue": {"max_payload_bytes": 2048, "fsync": False}})
    switchyard.start()
    raw = b'{"message": "' + b"x" * 5000 + b'"}'
    drop_incoming(switchyard.home, raw, "big.json")
    wait_until(lambda: _dead_names(switchyard) == ["big.json"], 20)
    assert "max_payload_bytes" in switchyard.cli("dead", "list").stdout
    shown = switchyard.cli("dead", "show", "big.json", "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["payload"]["message"] == "x" * 5000
    assert _status(switchyard)["dead_letter_count"] == 1
    assert switchyard.cli("dead", "retry", "big.json").returncode == 0  # still too large: quarantined again
    wait_until(lambda: len(switchyard.events("message.invalid")) == 2, 20)
    assert [letter.data for letter in wait_until(switchyard.dead_letters, 20)] == [raw]
    assert switchyard.cli("dead", "drop", "big.json").stdout.strip() == "dropped big.json"
    assert switchyard.dead_letters() == [] and _dead_names(switchyard) == []
