"""`alerts:` end to end: `switchyard run` as a process tells an operators' Telegram chat (the fake Bot API on
127.0.0.1) of its dead letters, grouped, and never of its own alert's failure. On both queue backends."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from gateway.testing import drop_incoming, wait_until
from tests.e2e.conftest import Switchyard, both_backends
from tests.e2e.fake_thread import FakeThread
from tests.fakes.telegram_server import FakeTelegram, Sent

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120), both_backends]

OPS_CHAT = "-10042"
TOKEN_ENV = "SWITCHYARD_E2E_OPS_TOKEN"
WAIT_S = 40


@pytest.fixture
def telegram() -> Iterator[FakeThread[FakeTelegram]]:
    with FakeThread(FakeTelegram) as fake:
        yield fake


def start(switchyard: Switchyard, telegram: FakeThread[FakeTelegram], **alerts: Any) -> FakeTelegram:
    fake = telegram.server
    switchyard.env[TOKEN_ENV] = fake.token
    switchyard.configure({
        "channels": [{"id": "ops", "type": "telegram", "token_env": TOKEN_ENV, "mode": "polling",
                      "base_url": f"{fake.url}/bot", "base_file_url": f"{fake.url}/file/bot",
                      "poll_timeout_sec": 1, "reconnect_initial_sec": 0.05, "reconnect_max_sec": 0.5}],
        "alerts": {"to": {"profile": "ops", "conversationId": OPS_CHAT}, **alerts}})
    switchyard.start()
    return fake


def ops_messages(telegram: FakeThread[FakeTelegram]) -> list[Sent]:
    return [sent for sent in telegram.run(lambda: list(telegram.server.sent)) if sent.chat == OPS_CHAT]


def dead_names(switchyard: Switchyard) -> list[str]:
    return [letter["name"] for letter in json.loads(switchyard.cli("dead", "list", "--json").stdout)]


def test_a_dead_letter_is_one_alert_in_the_operators_chat(switchyard: Switchyard,
                                                          telegram: FakeThread[FakeTelegram]) -> None:
    start(switchyard, telegram, group_wait_sec=0.5, group_interval_sec=1)
    switchyard.send("fail-until 4", conversationId="c-dead")  # fails its 3 attempts
    [name] = wait_until(lambda: dead_names(switchyard), WAIT_S)
    [alert] = wait_until(lambda: ops_messages(telegram), WAIT_S)
    assert "1 dead letter" in (alert.text or "") and f"switchyard dead show {name}" in (alert.text or "")
    assert "conversation c-dead" in (alert.text or "")
    wait_until(lambda: switchyard.events("outgoing.sent"), WAIT_S)
    assert switchyard.stop() == 0, switchyard.output()
    assert len(ops_messages(telegram)) == 1 and len(switchyard.events("alert.sent")) == 1


def test_fifty_dead_letters_at_once_are_one_grouped_alert(switchyard: Switchyard,
                                                          telegram: FakeThread[FakeTelegram]) -> None:
    start(switchyard, telegram, group_wait_sec=5, group_interval_sec=60)
    wait_until(lambda: switchyard.events("gateway.started"), WAIT_S)
    for number in range(50):
        drop_incoming(switchyard.home, b"not json at all", f"garbage-{number:02}.json")
    wait_until(lambda: len(switchyard.events("message.invalid")) == 50, WAIT_S)
    [alert] = wait_until(lambda: ops_messages(telegram), WAIT_S)
    text = alert.text or ""
    assert ": 50 dead letters" in text.splitlines()[0] and "and 40 more" in text
    assert switchyard.stop() == 0, switchyard.output()
    assert len(ops_messages(telegram)) == 1 and len(switchyard.events("alert.sent")) == 1


def test_an_alert_that_cannot_be_delivered_does_not_alert_about_itself(switchyard: Switchyard,
                                                                        telegram: FakeThread[FakeTelegram]) -> None:
    fake = start(switchyard, telegram, group_wait_sec=0.5, group_interval_sec=1)
    telegram.run(fake.refuse_next)  # the operators' chat refuses the first alert for good: a dead reply
    drop_incoming(switchyard.home, b"first garbage", "garbage-1.json")
    [first] = wait_until(lambda: switchyard.events("alert.sent"), WAIT_S)
    wait_until(lambda: [e for e in switchyard.events("outgoing.failed") if e["file"] == first["file"]], WAIT_S)
    drop_incoming(switchyard.home, b"second garbage", "garbage-2.json")  # a later alert still goes out
    [second] = wait_until(lambda: ops_messages(telegram), WAIT_S)
    assert "garbage-2" in (second.text or "") and "switchyard-alert" not in (second.text or "")
    assert "garbage-1" not in (second.text or "")
    assert switchyard.stop() == 0, switchyard.output()
    assert len(switchyard.events("alert.sent")) == 2 and len(ops_messages(telegram)) == 1
