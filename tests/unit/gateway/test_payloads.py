"""gateway/payloads.py: the ordering keys a message holds, from its payload."""

from __future__ import annotations

import pytest

from gateway.payloads import command_word, ordering_keys
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
