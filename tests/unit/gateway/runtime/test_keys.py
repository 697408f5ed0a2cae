"""Ordering keys and the key scheduler."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.disk.locks import LockDirectory
from gateway.runtime.keys import KeyScheduler, command_word, ordering_keys
from gateway.testing import make_incoming


def test_conversation_key_falls_back_to_sender() -> None:
    message = make_incoming(channel="telegram", channelProfileId="tg", conversationId=None, senderId="42")
    assert ordering_keys(message) == ("conv:telegram/tg/42",)


def test_a_message_naming_a_run_holds_the_run_key_too() -> None:
    message = make_incoming(workflowRunId="r1")
    assert ordering_keys(message) == ("run:r1", "conv:console/console/c1")


@pytest.mark.parametrize("text", ["/stop", "/STOP", "  /stop now", "/stop@switchyard_bot", "/Cancel@bot please",
                                  "/cancel"])
def test_a_control_command_takes_its_conversations_control_key_alone(text: str) -> None:
    message = make_incoming(text, workflowRunId="r1")
    assert ordering_keys(message) == ("ctl:console/console/c1",)


@pytest.mark.parametrize("text", ["stop", "please /stop", "/stopper", "/cancelled", "status", "progress", "help",
                                  "what is the /status", "/statuses", "/usage_report", "/diagnose"])
def test_other_messages_keep_their_conversation_key(text: str) -> None:
    assert ordering_keys(make_incoming(text)) == ("conv:console/console/c1",)


@pytest.mark.parametrize("text", ["/status", "/STATUS", " /status please", "/status@switchyard_bot", "/Progress@bot",
                                  "/help", "/help@bot", "/usage", "/USAGE@My_Bot"])
def test_a_read_only_command_takes_its_conversations_control_key(text: str) -> None:
    assert ordering_keys(make_incoming(text)) == ("ctl:console/console/c1",)


@pytest.mark.parametrize("text", ["/status", "status", "Progress ", "/help"])
def test_a_read_only_command_naming_a_run_keeps_the_run_key_beside_the_control_key(text: str) -> None:
    assert ordering_keys(make_incoming(text, workflowRunId="r1")) == ("run:r1", "ctl:console/console/c1")


def test_a_channel_job_is_never_a_command() -> None:
    job = {"job_id": "j1"}
    for text in ("/status", "/stop"):
        assert ordering_keys(make_incoming(text, job=job)) == ("conv:console/console/c1",)


def test_a_tapped_button_is_a_control_message() -> None:
    assert ordering_keys(make_incoming("Allow", button="ap:abc:0")) == ("ctl:console/console/c1",)


def test_command_word_drops_a_bot_name_and_case() -> None:
    assert [command_word(t) for t in ("/Stop@My_Bot now", "/help", "hello /stop", "")] == ["/stop", "/help", "", ""]


def test_same_key_starts_in_claim_order_one_at_a_time() -> None:
    scheduler: KeyScheduler[str] = KeyScheduler(max_concurrency=8)
    scheduler.add((2, "b"), ("conv:x",), "second")
    scheduler.add((1, "a"), ("conv:x",), "first")
    assert [item for _, item in scheduler.ready()] == ["first"]
    assert list(scheduler.ready()) == []
    scheduler.finish(("conv:x",))
    assert [item for _, item in scheduler.ready()] == ["second"]


def test_independent_keys_start_together_up_to_the_limit() -> None:
    scheduler: KeyScheduler[str] = KeyScheduler(max_concurrency=2)
    for index, key in enumerate(("conv:a", "conv:b", "conv:c")):
        scheduler.add((index, key), (key,), key)
    assert [item for _, item in scheduler.ready()] == ["conv:a", "conv:b"]
    scheduler.finish(("conv:a",))
    assert [item for _, item in scheduler.ready()] == ["conv:c"]


def test_a_later_message_never_overtakes_an_earlier_one_sharing_any_key() -> None:
    scheduler: KeyScheduler[str] = KeyScheduler(max_concurrency=8)
    scheduler.add((1, "a"), ("run:r", "conv:x"), "run message")
    scheduler.add((2, "b"), ("conv:x",), "same conversation")
    scheduler.add((3, "c"), ("conv:y",), "other conversation")
    assert [item for _, item in scheduler.ready()] == ["run message", "other conversation"]


def test_a_held_place_blocks_its_keys_until_the_retry_is_claimed() -> None:
    scheduler: KeyScheduler[str] = KeyScheduler(max_concurrency=8)
    scheduler.hold((1, "a"), ("conv:x",))
    scheduler.add((2, "b"), ("conv:x",), "later")
    assert list(scheduler.ready()) == []
    scheduler.add((1, "a"), ("conv:x",), "retried")
    assert [item for _, item in scheduler.ready()] == ["retried"]
    scheduler.finish(("conv:x",))
    assert [item for _, item in scheduler.ready()] == ["later"]


def test_releasing_a_hold_unblocks_the_key() -> None:
    scheduler: KeyScheduler[str] = KeyScheduler(max_concurrency=8)
    scheduler.hold((1, "a"), ("conv:x",))
    scheduler.add((2, "b"), ("conv:x",), "later")
    scheduler.release_hold((1, "a"))
    assert [item for _, item in scheduler.ready()] == ["later"]


def test_sharing_locks_the_keys_of_claimed_messages_not_yet_started(tmp_path: Path) -> None:
    scheduler: KeyScheduler[str] = KeyScheduler(max_concurrency=1)
    scheduler.add((1, "a"), ("conv:x",), "running")
    scheduler.add((2, "b"), ("conv:y",), "claimed, waiting for a slot")
    assert [item for _, item in scheduler.ready()] == ["running"]
    assert scheduler.lock_running(LockDirectory(tmp_path, holder="lone"))
    other = LockDirectory(tmp_path, holder="other")
    assert not other.acquire("conv:x") and not other.acquire("conv:y")
