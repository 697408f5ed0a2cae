"""A gateway killed (kill -9) while a turn waits for a tool approval: the next start closes that approval
with a message to the conversation, the message is retried by the usual rules, its turn asks again, and
the answer to the new question is the one answer the message gets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.testing import wait_until
from tests.e2e.conftest import Switchyard, both_backends

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120), both_backends]
REPO = Path(__file__).resolve().parents[2]


def _pending(switchyard: Switchyard) -> list[str]:
    listed = switchyard.cli("approvals", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    return [row["id"] for row in json.loads(listed.stdout)]


def _texts(switchyard: Switchyard, message_id: str) -> list[str]:
    return [reply["message"] for reply in switchyard.replies(message_id)]


def test_a_restart_closes_the_pending_approval_and_the_retried_turn_asks_again(switchyard: Switchyard) -> None:
    switchyard.env.update({"SWITCHYARD_PLUGINS": "tests.e2e.approvalhost",
                           "PYTHONPATH": f"{REPO}:{switchyard.env.get('PYTHONPATH', '')}".rstrip(":")})
    switchyard.configure()
    switchyard.start()
    sent = switchyard.send("deploy the site")
    [first] = wait_until(lambda: _pending(switchyard), 20)
    wait_until(lambda: any("make deploy" in text for text in _texts(switchyard, sent["messageId"])), 20)
    switchyard.kill()

    switchyard.start()
    wait_until(lambda: any("The gateway restarted" in text for text in _texts(switchyard, sent["messageId"])), 20)
    [second] = wait_until(lambda: [i for i in _pending(switchyard) if i != first] or None, 30)
    assert first not in _pending(switchyard), "the abandoned approval is closed"
    allowed = switchyard.cli("approvals", "allow", second)
    assert allowed.returncode == 0, allowed.stderr
    wait_until(lambda: "deploy answered: allow-1" in _texts(switchyard, sent["messageId"]), 20)
    texts = _texts(switchyard, sent["messageId"])
    assert texts.count("deploy answered: allow-1") == 1 and not any("answered: None" in t for t in texts), texts
    assert sum("🔐" in text for text in texts) == 2, "asked once per attempt"
    assert switchyard.stop() == 0
