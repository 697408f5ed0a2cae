"""A heartbeat whose `notify` names a profile that does not exist says so, at start and in `status`."""

from __future__ import annotations

import json

from gateway.testing import wait_until
from tests.e2e.conftest import Switchyard


def test_a_missing_notify_profile_is_reported_at_start_and_in_status(switchyard: Switchyard) -> None:
    switchyard.configure({"channels": [{"id": "beat", "type": "heartbeat", "interval_sec": 60,
                                        "notify": {"profile": "ops-chat", "conversationId": "c1"}}]})
    switchyard.start()
    wait_until(lambda: switchyard.events("heartbeat.notify_missing"), 10)
    event = switchyard.events("heartbeat.notify_missing")[0]
    assert event["profile"] == "beat" and "ops-chat" in event["reason"]
    assert "notify profile 'ops-chat' is not configured" in switchyard.output()
    beat = json.loads(switchyard.cli("status", "--json").stdout)["heartbeats"][0]
    assert "ops-chat" in beat["problem"]
    assert "heartbeat beat: notify profile 'ops-chat' is not configured" in switchyard.cli("status").stdout
