"""Two `switchyard run` processes configured with the SAME Telegram profile, on one PostgreSQL, against
the fake Bot API (tests/fakes/telegram_server.py, which answers 409 to a second concurrent poller):
only one polls getUpdates; when it is killed with SIGKILL in the middle of a three-part reply, the
other takes the profile over within lease_sec, starts polling, and sends the parts not yet sent.

The reply is inserted straight into switchyard_outbox (as the postgres worker's PgOutbox would), so
this test does not depend on the inbound side of the postgres backend.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from gateway.backends.postgres import schema
from gateway.testing import wait_until
from tests.backends.postgres.outbound_kit import insert_reply, rows
from tests.e2e.conftest import Switchyard
from tests.e2e.fake_thread import FakeThread
from tests.fakes.telegram_server import FakeTelegram
from tests.process import clean_environment

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

LEASE_SEC = 4.0
TOKEN_ENV = "SWITCHYARD_PG_TELEGRAM_TOKEN"
REPLY = "\n\n".join(letter * 4000 for letter in "ABC")  # three parts of one reply (4096 a message)


def channel_state(switchyard: Switchyard) -> dict[str, Any]:
    try:
        status = json.loads((switchyard.home.state / "gateway.json").read_bytes())
    except (OSError, ValueError):
        return {}
    entry: dict[str, Any] = status.get("channels", {}).get("tg", {})
    return entry


def make_switchyard(root: Path, fake: FakeTelegram, dsn: str) -> Switchyard:
    state = root.parent / f"{root.name}-fake-state"
    state.mkdir(parents=True)
    env = clean_environment({"SWITCHYARD_DSN": dsn, TOKEN_ENV: fake.token, "FAKE_STATE": str(state),
                             "FAKE_LOG": str(root.parent / f"{root.name}-calls.jsonl")})
    switchyard = Switchyard(root, env)
    switchyard.configure({
        "queue": {"backend": "postgres", "lease_sec": LEASE_SEC, "max_attempts": 3, "backoff_initial_ms": 50,
                  "backoff_max_ms": 200, "fsync": False},
        "channels": [{"id": "tg", "type": "telegram", "token_env": TOKEN_ENV, "mode": "polling",
                      "base_url": f"{fake.url}/bot", "base_file_url": f"{fake.url}/file/bot",
                      "poll_timeout_sec": 1, "reconnect_initial_sec": 0.05, "reconnect_max_sec": 0.5}],
    })
    return switchyard


def test_only_one_process_polls_a_shared_telegram_profile_and_the_other_takes_over_after_kill_9(
        pg_dsn: str, tmp_path: Path) -> None:
    schema.migrate(pg_dsn)
    with FakeThread(FakeTelegram) as telegram:
        fake = telegram.server
        first = make_switchyard(tmp_path / "a", fake, pg_dsn)
        second = make_switchyard(tmp_path / "b", fake, pg_dsn)
        try:
            first.start()
            wait_until(lambda: telegram.run(lambda: len(fake.poll_times)) >= 2, 20)
            assert channel_state(first)["state"] == "running"
            second.start()
            standby = wait_until(lambda: (e := channel_state(second)).get("state") == "standby" and e, 20)
            assert str(standby["reason"]).startswith("owned by ") and f":{first.process.pid}:" in standby["reason"]  # type: ignore[union-attr]

            telegram.run(fake.hold_sends_after, 1)  # the second part waits at the fake until released
            insert_reply(pg_dsn, "1001", REPLY, profile="tg", channel="telegram")
            wait_until(lambda: telegram.run(lambda: fake.held) == 1, 20)
            assert second.count("channel.lease_taken") == 0 and second.count("channel.standby") == 1
            first.kill()
            killed = time.monotonic()
            wait_until(lambda: telegram.run(lambda: fake.held) == 0, 10)  # its connection is gone
            telegram.run(fake.release_held.set)

            first_poll = wait_until(lambda: telegram.run(lambda: [t for t in fake.poll_times if t > killed]), 30)
            takeover = first_poll[0] - killed
            print(f"the standby polled {takeover:.2f}s after the owner's kill -9 (lease_sec {LEASE_SEC:g})")
            assert takeover <= LEASE_SEC * 2  # within a lease's life and its renewals (a bound, not a goal)
            wait_until(lambda: second.count("channel.lease_taken") >= 1, 10)
            assert second.count("channel.lease_taken") == 1

            sent = wait_until(lambda: (s := telegram.run(lambda: list(fake.sent))) and len(s) >= 3 and s, 30)
            assert [(item.text or "")[:1] for item in sent] == ["A", "B", "C"]  # each part exactly once
            assert [len(item.text or "") for item in sent] == [4000, 4000, 4000]
            wait_until(lambda: [r["state"] for r in rows(pg_dsn)] == ["sent"], 10)
            assert telegram.run(lambda: fake.conflicts) == 0  # never two pollers at once
            assert channel_state(second)["state"] == "running"
            assert second.stop() == 0
        finally:
            for switchyard in (first, second):
                if switchyard.process is not None:
                    switchyard.process.kill()
                    switchyard.process.wait(10)


def test_a_telegram_message_is_answered_through_the_outbox_table(pg_dsn: str, tmp_path: Path) -> None:
    """The postgres branch of the Gateway end to end: the reply lands in switchyard_outbox (from
    outgoing/ on the file worker, from PgOutbox on the postgres worker) and the owner sends it."""
    schema.migrate(pg_dsn)
    with FakeThread(FakeTelegram) as telegram:
        fake = telegram.server
        switchyard = make_switchyard(tmp_path / "a", fake, pg_dsn)
        try:
            switchyard.start()
            message = telegram.run(fake.message, 1001, "hello over postgres", first_name="Ada")
            telegram.call(fake.deliver, message)
            sent = wait_until(lambda: [s for s in telegram.run(lambda: list(fake.sent))
                                       if "write about hello over postgres" in (s.text or "")], 30)
            assert len(sent) == 1 and sent[0].reply_to == message["message_id"]
            wait_until(lambda: [r["state"] for r in rows(pg_dsn)] == ["sent"], 10)
            assert switchyard.stop() == 0
            assert not list(switchyard.home.outgoing.glob("*.json"))
        finally:
            if switchyard.process is not None:
                switchyard.process.kill()
                switchyard.process.wait(10)
