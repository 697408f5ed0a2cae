"""Spec 002 end to end: `switchyard run` as a process, payload files in, replies out; on both queue backends."""

from __future__ import annotations

import json
import os
import re
import signal
import time

import pytest

from gateway.testing import drop_incoming, wait_until
from tests.e2e.conftest import Switchyard, both_backends, provider_calls

pytestmark = [pytest.mark.e2e, both_backends]

OUTGOING_FIELDS = {"channel", "channelProfileId", "sender", "message", "originalMessage", "timestamp",
                   "messageId", "agent", "conversationId", "files", "workflowRunId", "workflowStepId"}


def test_a_dropped_message_is_answered_with_every_outgoing_field(switchyard: Switchyard) -> None:
    switchyard.configure()
    switchyard.start()
    sent = switchyard.send("hello there", channel="telegram", channelProfileId="tg-main", messageId="4242",
                           conversationId="chat-7")
    reply = switchyard.reply_to("4242")[0]
    assert re.fullmatch(r"telegram_4242_\d+\.json", reply["_file"])
    assert set(reply) >= OUTGOING_FIELDS
    assert reply["message"].startswith("agent Reply answered: write about hello there")
    assert reply["originalMessage"] == "hello there"
    assert reply["agent"] == "writer"
    assert (reply["channel"], reply["channelProfileId"]) == ("telegram", "tg-main")
    assert reply["conversationId"] == "chat-7"
    assert reply["workflowRunId"] and reply["workflowStepId"] == "Reply"
    assert reply["sender"] == sent["sender"]
    assert switchyard.stop() == 0
    assert not list(switchyard.home.incoming.iterdir())
    assert switchyard.unfinished() == []


def test_selector_request_and_result_files_are_kept(switchyard: Switchyard) -> None:
    switchyard.configure()
    switchyard.start()
    switchyard.send("start chat please", messageId="sel-1")
    switchyard.reply_to("sel-1")
    request = json.loads(next(switchyard.home.select_incoming.glob("*.json")).read_text())
    assert request["message"]["messageId"] == "sel-1"
    assert {w["id"] for w in request["workflows"]} == {"chat", "build"}
    functions = {f["name"] for f in request["availableFunctions"]}
    assert {"list_workflows", "cancel_run", "queue_stats", "shout"} <= functions
    [result_file] = wait_until(lambda: list(switchyard.home.select_results.glob("*.json")))
    result = json.loads(result_file.read_text())
    assert result["decision"]["action"] == "workflow_start"
    assert result["exitCode"] == 0 and "durationMs" in result


def test_heartbeat_reply_is_named_by_message_id(switchyard: Switchyard) -> None:
    # the heartbeat plugin declares the name for its channel type (switchyard_reply_named_by_message_id)
    switchyard.configure({"channels": [{"id": "beat", "type": "heartbeat", "interval_sec": 3600}]})
    switchyard.start()
    switchyard.send("heartbeat", channel="heartbeat", channelProfileId="beat", messageId="hb-1")
    assert switchyard.reply_to("hb-1")[0]["_file"] == "hb-1.json"


def test_heartbeat_reply_is_named_by_message_id_while_no_heartbeat_profile_runs(switchyard: Switchyard) -> None:
    # the name belongs to the payload's channel type, not to a running profile of it
    switchyard.configure()
    switchyard.start()
    switchyard.send("heartbeat", channel="heartbeat", channelProfileId="beat", messageId="hb-2")
    assert switchyard.reply_to("hb-2")[0]["_file"] == "hb-2.json"


def test_one_conversation_is_sequential_while_others_run_concurrently(switchyard: Switchyard, fake_log) -> None:
    switchyard.configure()
    switchyard.start()
    for i in range(3):  # a0 is long, so B starting before it ends does not depend on the machine's load
        switchyard.send(f"sleep {1.5 if i == 0 else 0.4} a{i}", conversationId="A", messageId=f"a{i}")
        switchyard.send(f"sleep 0.4 b{i}", conversationId="B", messageId=f"b{i}")
    for i in range(3):
        switchyard.reply_to(f"a{i}")
        switchyard.reply_to(f"b{i}")
    calls = [c for c in provider_calls(fake_log) if c["kind"] in ("start", "end")]
    for conversation in ("A", "B"):
        mine = [c for c in calls if c["conversation"] == conversation]
        assert [c["kind"] for c in mine] == ["start", "end"] * 3, "overlap within one conversation"
        assert [c["text"].split()[-1] for c in mine[::2]] == [f"{conversation.lower()}{i}" for i in range(3)]
    starts = {c["conversation"]: c["t"] for c in reversed(calls) if c["kind"] == "start"}
    first_end_a = next(c["t"] for c in calls if c["kind"] == "end" and c["conversation"] == "A")
    assert starts["B"] < first_end_a, "conversation B waited for conversation A"


def test_forced_failures_are_requeued_with_events_then_answered(switchyard: Switchyard) -> None:
    switchyard.configure()
    switchyard.start()
    switchyard.send("fail-until 3", messageId="flaky")
    reply = switchyard.reply_to("flaky")[0]
    assert reply["agent"] == "writer"

    def flaky_events(name: str) -> list[dict[str, object]]:
        return [e for e in switchyard.events(name) if str(e.get("job_id", "")).endswith("flaky.json")]

    wait_until(lambda: len(flaky_events("job.requeued")) >= 2, 10)  # the event log is written per turn
    assert len(flaky_events("job.failed.retryable")) == 2
    assert len(flaky_events("job.requeued")) == 2
    assert switchyard.dead_letters() == []


def test_dead_letter_after_max_attempts_keeps_bytes_and_apologises(switchyard: Switchyard) -> None:
    switchyard.configure()
    switchyard.start()
    path = switchyard.home.incoming / "doomed.json"
    payload = {"channel": "console", "channelProfileId": "console", "sender": "Ada", "senderId": "u1",
               "message": "always-fail", "timestamp": 1700000000000, "messageId": "doomed",
               "conversationId": "c1", "customKey": {"kept": True}}
    raw = json.dumps(payload, indent=3).encode()
    drop_incoming(switchyard.home, raw, path.name)
    [letter] = wait_until(lambda: [d for d in switchyard.dead_letters() if d.reason], 20)  # its report written
    assert (letter.name, letter.kind, letter.data) == ("doomed.json", "message", raw)
    assert letter.attempts == 3 and "exit" in letter.reason.lower()
    apology = switchyard.reply_to("doomed")[0]
    assert "Sorry" in apology["message"]
    # the event is written after the dead letter and its apology (at the end of the worker's turn): wait for it
    [final] = wait_until(lambda: switchyard.events("job.failed.final"), 10)
    assert final["job_id"] == "doomed.json" and final["attempts"] == 3


def test_invalid_payloads_are_quarantined_and_the_worker_goes_on(switchyard: Switchyard) -> None:
    switchyard.configure({"queue": {"max_payload_bytes": 2048, "fsync": False}})
    switchyard.start()
    drop_incoming(switchyard.home, b"{broken", "broken.json")
    drop_incoming(switchyard.home, {"channel": "console"}, "schema.json")
    drop_incoming(switchyard.home, b'{"message": "' + b"x" * 5000 + b'"}', "huge.json")
    switchyard.send("still alive?", messageId="after-bad")
    switchyard.reply_to("after-bad")
    wait_until(lambda: len(switchyard.dead_letters()) == 3, 20)
    letters = {letter.name: letter for letter in switchyard.dead_letters()}
    for name, reason in (("broken.json", "not valid JSON"), ("schema.json", "wrong schema"),
                         ("huge.json", "max_payload_bytes")):
        assert reason in letters[name].reason
    assert letters["broken.json"].data == b"{broken"
    wait_until(lambda: len(switchyard.events("message.invalid")) >= 3, 10)  # written after the quarantine
    assert len(switchyard.events("message.invalid")) == 3


def test_kill_9_during_processing_loses_nothing(switchyard: Switchyard, fake_log) -> None:
    switchyard.configure()
    switchyard.start()
    ids = [f"k{i}" for i in range(6)]
    for i, message_id in enumerate(ids):
        switchyard.send(f"sleep 0.3 {message_id}", conversationId=f"conv{i % 2}", messageId=message_id)
    wait_until(lambda: any(c["kind"] == "start" for c in provider_calls(fake_log)), 20)
    switchyard.kill()
    assert switchyard.in_flight(), "nothing was in flight when killed"
    switchyard.start()
    for message_id in ids:
        switchyard.reply_to(message_id)
    assert switchyard.stop() == 0
    assert switchyard.unfinished() == []
    assert switchyard.dead_letters() == []
    assert switchyard.events("queue.recovered")
    assert all(len(switchyard.replies(message_id)) == 1 for message_id in ids)


def test_sigterm_finishes_in_flight_work_and_exits_zero(switchyard: Switchyard, fake_log) -> None:
    switchyard.configure()
    switchyard.start()
    switchyard.send("sleep 1.5 slowpoke", messageId="slow")
    wait_until(lambda: any(c["kind"] == "start" for c in provider_calls(fake_log)), 20)
    stopped_at = time.time()
    assert switchyard.stop() == 0
    assert switchyard.replies("slow"), "the message in flight at SIGTERM was not answered"
    selector = [c for c in provider_calls(fake_log) if c["kind"] in ("start", "end")]
    assert [c["kind"] for c in selector] == ["start", "end"]
    assert selector[1]["t"] > stopped_at, "the work had finished before SIGTERM: nothing was in flight"
    assert switchyard.unfinished() == []


def test_a_repeated_message_id_is_answered_once(switchyard: Switchyard) -> None:
    switchyard.configure()
    switchyard.start()
    switchyard.send("once please", messageId="dup", channel="slack", channelProfileId="team")
    switchyard.reply_to("dup")
    switchyard.send("once please", messageId="dup", channel="slack", channelProfileId="team")
    wait_until(lambda: switchyard.events("message.duplicate"), 20)
    assert len(switchyard.replies("dup")) == 1


def test_send_wait_with_an_answered_id_says_duplicate_and_shows_no_earlier_answer(switchyard: Switchyard) -> None:
    switchyard.configure()
    switchyard.start()
    first = switchyard.cli("send", "tell me about apples", "--message-id", "again", "--wait", "20")
    assert first.returncode == 0, first.stderr
    assert "write about tell me about apples" in first.stdout
    second = switchyard.cli("send", "tell me about pears", "--message-id", "again", "--wait", "20")
    assert second.returncode == 4, (second.returncode, second.stdout, second.stderr)
    assert second.stdout == ""  # the earlier answer is not passed off as the answer to "pears"
    assert "apples" not in second.stderr
    assert "duplicate" in second.stderr and "already answered" in second.stderr
    assert "not processed again" in second.stderr
    assert len(switchyard.replies("again")) == 1


def test_a_message_answered_before_a_restart_is_not_answered_again(switchyard: Switchyard, fake_log) -> None:
    switchyard.configure()
    switchyard.start()
    switchyard.send("once please", messageId="dup", channel="slack", channelProfileId="team")
    switchyard.reply_to("dup")
    assert switchyard.stop() == 0
    switchyard.start()
    switchyard.send("once please", messageId="dup", channel="slack", channelProfileId="team")
    switchyard.send("after the duplicate", messageId="later", channel="slack", channelProfileId="team")
    switchyard.reply_to("later")
    wait_until(lambda: switchyard.events("message.duplicate"), 20)
    assert len(switchyard.replies("dup")) == 1
    assert [c["text"] for c in provider_calls(fake_log) if c["kind"] == "start"].count("once please") == 1


def test_files_dropped_while_stopped_are_processed_at_start(switchyard: Switchyard) -> None:
    switchyard.configure()
    switchyard.send("waiting in line", messageId="early")
    stale = switchyard.home.incoming / "crashed-writer.json.tmp"
    stale.write_text("{")
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    switchyard.start()
    switchyard.reply_to("early")
    assert not stale.exists()


def test_without_channels_sigint_also_exits_zero(switchyard: Switchyard) -> None:
    switchyard.configure()
    switchyard.start()
    assert switchyard.process is not None
    switchyard.process.send_signal(signal.SIGINT)
    assert switchyard.process.wait(30) == 0
    switchyard.process = None
