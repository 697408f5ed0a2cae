"""A schedule added to orchestrator.yaml while `switchyard run` runs fires at its first occurrence (issue 32 §11):
the reload of the file wakes the scheduler, which otherwise slept its 30 s poll, having had no schedule."""

from __future__ import annotations

import math
import time
from datetime import datetime

import pytest
import yaml

from gateway.testing import wait_until
from tests.e2e.conftest import ORCHESTRATOR, Switchyard

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

EVERY_S = 10  # an interval counts from the epoch: occurrences fall on multiples of it


def test_a_schedule_added_while_running_fires_at_its_first_occurrence(switchyard: Switchyard) -> None:
    switchyard.configure({"channels": [{"id": "beat", "type": "heartbeat", "interval_sec": 3600}]})
    switchyard.start()  # the scheduler's first pass finds no schedule
    wait_until(lambda: 1.0 <= time.time() % EVERY_S < 2.0, EVERY_S + 1, interval_s=0.05)  # 8 s before one

    config = {**ORCHESTRATOR, "schedules": {"ping": {"every_sec": EVERY_S, "prompt": "ping",
                                                     "deliver": {"profile": "beat", "conversationId": "ops"}}}}
    (switchyard.home.orchestrators / "main" / "orchestrator.yaml").write_text(yaml.safe_dump(config))
    first = math.ceil(time.time() / EVERY_S) * EVERY_S

    fired = wait_until(lambda: switchyard.events("schedule.fired"), EVERY_S + 20)
    assert datetime.fromisoformat(fired[0]["occurrence"]).timestamp() == first, fired[0]
    assert fired[0]["late_s"] < 5
    assert not switchyard.events("schedule.skipped")
