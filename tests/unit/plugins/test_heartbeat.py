"""plugins/heartbeat: the missed-beat flag `status` shows, and forwarding of an answer other than HEARTBEAT_OK."""

from __future__ import annotations

import json
from pathlib import Path

from gateway.api import ChannelContext
from gateway.home import Home
from gateway.models import OutgoingPayload
from gateway.settings import ChannelProfile, Settings
from gateway.telemetry.events import EventLog, now_ms, read_events
from plugins.heartbeat import MISS_GRACE_S, read_heartbeat, state_path
from plugins.heartbeat.channel import HeartbeatChannel


class RecordingOutbox:
    """Keeps what the channel forwards."""

    def __init__(self) -> None:
        self.payloads: list[OutgoingPayload] = []

    def write(self, payload: OutgoingPayload) -> Path:
        self.payloads.append(payload)
        return Path("/dev/null")


def _profile(**options: object) -> ChannelProfile:
    return ChannelProfile.model_validate({"id": "beat", "type": "heartbeat", "interval_sec": 10, **options})


def _record(home: Home, **state: object) -> None:
    path = state_path(home, "beat")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"profile": "beat", "interval_sec": 10, **state}))


def test_a_beat_is_missed_only_when_its_answer_is_overdue(home: Home) -> None:
    profile = _profile()
    assert read_heartbeat(home, profile)["missed"] is None, "no beat recorded yet"
    overdue_ms = int((2 * 10 + MISS_GRACE_S) * 1000)
    _record(home, last_answer_ms=now_ms() - overdue_ms + 2000)
    assert read_heartbeat(home, profile)["missed"] is False
    _record(home, last_answer_ms=now_ms() - overdue_ms - 2000)
    assert read_heartbeat(home, profile)["missed"] is True
    _record(home, started_ms=now_ms() - overdue_ms - 2000)
    assert read_heartbeat(home, profile)["missed"] is True, "never answered since it started long ago"


def _channel(home: Home, outbox: RecordingOutbox, events: EventLog,
             conversation: str | int = "room-7") -> HeartbeatChannel:
    profile = _profile(notify={"profile": "ops", "conversationId": conversation})
    settings = Settings(channels=[profile, ChannelProfile(id="ops", type="console")])
    state_path(home, "beat").parent.mkdir(parents=True, exist_ok=True)  # as start() does
    return HeartbeatChannel(profile, ChannelContext(home=home, settings=settings, profile=profile, events=events,
                                                    outbox=outbox))


def _answer(text: str) -> OutgoingPayload:
    return OutgoingPayload(channel="heartbeat", channelProfileId="beat", sender="heartbeat", message=text,
                           timestamp=now_ms(), messageId=f"hb-beat-{now_ms()}", conversationId="heartbeat")


async def test_an_answer_other_than_ok_is_forwarded_to_the_notify_conversation(home: Home) -> None:
    outbox, events = RecordingOutbox(), EventLog(home.events_file)
    channel = _channel(home, outbox, events)
    await channel.send(_answer("HEARTBEAT_OK"))
    assert outbox.payloads == [], "a healthy beat is not forwarded"
    await channel.send(_answer("disk almost full"))
    events.close()
    [forwarded] = outbox.payloads
    assert (forwarded.channel, forwarded.channelProfileId, forwarded.conversationId) == ("console", "ops", "room-7")
    assert "disk almost full" in forwarded.message and "beat" in forwarded.message
    names = [e["event"] for e in read_events(home.events_file)]
    assert names == ["heartbeat.ok", "heartbeat.alert"]
    assert json.loads(state_path(home, "beat").read_text())["healthy"] is False


async def test_a_notify_conversation_id_written_as_a_number_is_forwarded_to(home: Home) -> None:
    """`conversationId: -1001234567890` (a Telegram group as YAML reads it) is that chat's id."""
    outbox, events = RecordingOutbox(), EventLog(home.events_file)
    channel = _channel(home, outbox, events, conversation=-1001234567890)
    await channel.send(_answer("disk almost full"))
    events.close()
    assert [forwarded.conversationId for forwarded in outbox.payloads] == ["-1001234567890"]


async def test_a_forwarded_answer_shows_its_buttons_as_a_numbered_list(home: Home) -> None:
    outbox, events = RecordingOutbox(), EventLog(home.events_file)
    channel = _channel(home, outbox, events)
    answer = _answer("restart the disk cleaner?").model_copy(
        update={"buttons": [{"id": "ap:a1:0", "label": "Yes"}, {"id": "ap:a1:1", "label": "No"}]})
    await channel.send(answer)
    events.close()
    [forwarded] = outbox.payloads
    assert forwarded.message.endswith("restart the disk cleaner?\n\n1. Yes\n2. No\nReply 1 or 2")
