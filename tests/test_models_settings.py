"""Payload models keep unknown keys; settings errors name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.models import IncomingPayload, OutgoingPayload
from gateway.settings import SettingsError, load_settings

EXAMPLE = Path(__file__).resolve().parents[1] / "settings.example.yaml"


def test_unknown_keys_survive_a_round_trip() -> None:
    raw = {"channel": "slack", "message": "hi", "timestamp": 1, "messageId": "m", "threadTs": "1.2"}
    assert IncomingPayload.model_validate(raw).model_dump(exclude_none=True)["threadTs"] == "1.2"


def test_reply_copies_the_conversation_fields() -> None:
    incoming = IncomingPayload(channel="slack", channelProfileId="team", sender="Ada", senderId="U1",
                               message="hi [file: /tmp/a.png]", timestamp=1, messageId="m",
                               conversationId="C1", workflowRunId="r1")
    reply = OutgoingPayload.reply_to(incoming, "see [send_file: /x/y.txt]", agent="writer", timestamp=2)
    assert (reply.channel, reply.channelProfileId, reply.conversationId, reply.workflowRunId) == (
        "slack", "team", "C1", "r1")
    assert reply.message == "see" and reply.files == ["/x/y.txt"] and reply.originalMessage == incoming.message
    assert incoming.file_paths() == ["/tmp/a.png"]


def test_missing_settings_file_means_the_embedded_default(tmp_path: Path) -> None:
    settings = load_settings(tmp_path / "absent.yaml")
    assert [c.type for c in settings.channels] == ["console"]


def test_example_settings_load() -> None:
    assert load_settings(EXAMPLE).queue.max_attempts == 5


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("queue: {max_attempts: 0}", "queue.max_attempts"),
        ("queue: {max_attemps: 3}", "queue.max_attemps"),
        ("providers: {x: {command: []}}", "providers.x.command"),
        ("channels: [{id: a, type: console, orchestrator: nope}]", "channels.0.orchestrator"),
        ("default_orchestrator: ghost", "default_orchestrator"),
        ("- a list", "top level"),
        ("queue: [", "cannot read"),
    ],
)
def test_invalid_settings_name_the_key(tmp_path: Path, text: str, key: str) -> None:
    path = tmp_path / "settings.yaml"
    path.write_text(text)
    with pytest.raises(SettingsError) as caught:
        load_settings(path)
    assert key in str(caught.value) and str(path) in str(caught.value)
