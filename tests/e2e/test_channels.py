"""Each chat channel end to end: `switchyard run` as a process, the platform faked, the providers faked.

A person's message is injected at the platform's fake (tests/fakes), the gateway process takes it in
through the channel plugin, the fake selector and agent CLIs answer (`agent Reply answered: write
about <text>`), and the fake records the bot's reply in the same conversation, threaded or quoting
where the platform does that. The fakes run on their own loop in a thread (tests/e2e/fake_thread.py).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from gateway.testing import wait_until
from tests.e2e.conftest import Switchyard
from tests.e2e.fake_thread import FakeThread
from tests.fakes.discord_server import DiscordFakeServer
from tests.fakes.slack_server import FakeSlack
from tests.fakes.telegram_server import FakeTelegram
from tests.fakes.whatsapp_server import FakeWhatsApp

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

REPLY_TIMEOUT_S = 30
STATUS_TIMEOUT_S = 15


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def answer(text: str) -> str:
    """What the fake agent says about `text` (tests/e2e/providers/agent.py with the default prompt)."""
    return f"write about {text}"


def channel_states(switchyard: Switchyard) -> dict[str, Any]:
    result = switchyard.cli("status", "--json")
    assert result.returncode in (0, 3), result.stderr  # 3: the gateway is not running (yet)
    gateway: dict[str, Any] = json.loads(result.stdout)["gateway"]
    return gateway.get("channels", {}) if gateway.get("running") else {}


def wait_for_state(switchyard: Switchyard, profile: str, state: str) -> dict[str, Any]:
    """Polls `switchyard status --json` until `profile` is in `state`; returns that profile's entry."""
    def reached() -> dict[str, Any] | None:
        entry: dict[str, Any] | None = channel_states(switchyard).get(profile)
        return entry if entry and entry.get("state") == state else None

    try:
        found: dict[str, Any] = wait_until(reached, STATUS_TIMEOUT_S, interval_s=0.2)
    except AssertionError:
        raise AssertionError(f"{profile} never {state}: {channel_states(switchyard)}") from None
    return found


def assert_secrets_not_written(switchyard: Switchyard, *secrets: str) -> None:
    """No file under the home (events, queue, state, the process log) holds any of the secret values."""
    files = {p for p in switchyard.home.root.rglob("*") if p.is_file()} | {switchyard.log_path}
    assert len(files) > 5, files  # settings, events, queue files, the log, …
    for path in sorted(files):
        data = path.read_bytes()
        for secret in secrets:
            assert secret.encode() not in data, f"a secret value is written in {path}"


def finish(switchyard: Switchyard, profile: str, *secrets: str) -> None:
    """The profile shows `running`, the gateway stops with 0, and no secret value was written anywhere."""
    assert wait_for_state(switchyard, profile, "running")["type"]
    assert switchyard.stop() == 0, switchyard.log_path.read_text()
    assert_secrets_not_written(switchyard, *secrets)


# --- the fakes, each on its own loop thread (set up before `switchyard`, so torn down after it) ---------


@pytest.fixture
def telegram() -> Iterator[FakeThread[FakeTelegram]]:
    with FakeThread(FakeTelegram) as fake:
        yield fake


@pytest.fixture
def discord() -> Iterator[FakeThread[DiscordFakeServer]]:
    with FakeThread(DiscordFakeServer) as fake:
        yield fake


@pytest.fixture
def slack() -> Iterator[FakeThread[FakeSlack]]:
    with FakeThread(FakeSlack) as fake:
        yield fake


@pytest.fixture
def whatsapp() -> Iterator[FakeThread[FakeWhatsApp]]:
    with FakeThread(FakeWhatsApp) as fake:
        yield fake


TELEGRAM_ENV = "SWITCHYARD_E2E_TELEGRAM_TOKEN"


def telegram_profile(fake: FakeTelegram, profile_id: str = "tg", token_env: str = TELEGRAM_ENV) -> dict[str, Any]:
    return {"id": profile_id, "type": "telegram", "token_env": token_env, "mode": "polling",
            "base_url": f"{fake.url}/bot", "base_file_url": f"{fake.url}/file/bot", "poll_timeout_sec": 1,
            "reconnect_initial_sec": 0.05, "reconnect_max_sec": 0.5}


# --- one conversation per channel ---------------------------------------------------------------------


def test_telegram_message_is_answered_quoting_it(telegram: FakeThread[FakeTelegram],
                                                 switchyard: Switchyard) -> None:
    fake = telegram.server
    switchyard.env[TELEGRAM_ENV] = fake.token
    switchyard.configure({"channels": [telegram_profile(fake)]})
    switchyard.start()

    text = "hello from telegram"
    message = telegram.run(fake.message, 1001, text, first_name="Ada")
    telegram.call(fake.deliver, message)

    def replies() -> list[Any]:
        return [s for s in telegram.run(lambda: list(fake.sent)) if answer(text) in (s.text or "")]

    sent = wait_until(replies, REPLY_TIMEOUT_S)
    assert len(sent) == 1
    assert sent[0].chat == "1001" and sent[0].reply_to == message["message_id"]
    finish(switchyard, "tg", fake.token)


def test_discord_message_is_answered_as_a_reply(discord: FakeThread[DiscordFakeServer],
                                                switchyard: Switchyard) -> None:
    fake = discord.server
    switchyard.env["SWITCHYARD_E2E_DISCORD_TOKEN"] = fake.token
    switchyard.configure({"channels": [{"id": "dc", "type": "discord", "token_env": "SWITCHYARD_E2E_DISCORD_TOKEN",
                                        "api_base_url": fake.api_base_url, "gateway_url": fake.gateway_url}]})
    switchyard.start()

    dm, text = "4242", "hello from discord"
    message_id = discord.call(fake.message_create, dm, fake.user("1001", "Ada"), text)

    def replies() -> list[Any]:
        return [m for m in discord.run(lambda: list(fake.sent)) if answer(text) in (m.content or "")]

    sent = wait_until(replies, REPLY_TIMEOUT_S)
    assert len(sent) == 1
    assert sent[0].channel_id == dm and sent[0].reply_to == message_id
    finish(switchyard, "dc", fake.token)


@pytest.mark.parametrize("mode", ["socket", "http"])
def test_slack_message_in_a_thread_is_answered_in_that_thread(mode: str, slack: FakeThread[FakeSlack],
                                                              switchyard: Switchyard) -> None:
    fake = slack.server
    switchyard.env.update(SWITCHYARD_E2E_SLACK_BOT=fake.bot_token, SWITCHYARD_E2E_SLACK_APP=fake.app_token,
                          SWITCHYARD_E2E_SLACK_SECRET=fake.signing_secret)
    profile: dict[str, Any] = {"id": "sl", "type": "slack", "mode": mode, "api_base_url": f"{fake.url}/api/",
                               "bot_token_env": "SWITCHYARD_E2E_SLACK_BOT",
                               "app_token_env": "SWITCHYARD_E2E_SLACK_APP",
                               "signing_secret_env": "SWITCHYARD_E2E_SLACK_SECRET"}
    if mode == "http":
        port = free_port()
        profile.update(http_port=port, http_path="/slack/events")
        fake.events_url = f"http://127.0.0.1:{port}/slack/events"
    switchyard.configure({"channels": [profile]})
    switchyard.start()

    channel, text = "C100", "hello from slack"
    thread_ts = slack.run(fake.next_ts)
    slack.run(fake.users.__setitem__, "U1001", "Ada")
    event = slack.run(fake.message_event, text, user="U1001", channel=channel, thread_ts=thread_ts)
    slack.call(fake.deliver, event)

    def replies() -> list[Any]:
        return [s for s in slack.run(lambda: list(fake.sent)) if answer(text) in (s.text or "")]

    sent = wait_until(replies, REPLY_TIMEOUT_S)
    assert len(sent) == 1
    assert sent[0].conversation == channel and sent[0].reply_to == thread_ts
    finish(switchyard, "sl", fake.bot_token, fake.app_token, fake.signing_secret)


def test_whatsapp_message_is_answered_quoting_it(whatsapp: FakeThread[FakeWhatsApp],
                                                 switchyard: Switchyard) -> None:
    fake = whatsapp.server
    switchyard.env.update(SWITCHYARD_E2E_WA_TOKEN=fake.token, SWITCHYARD_E2E_WA_SECRET=fake.app_secret,
                          SWITCHYARD_E2E_WA_VERIFY=fake.verify_token)
    port = free_port()
    switchyard.configure({"channels": [{
        "id": "wa", "type": "whatsapp", "api_base_url": fake.api_base_url, "phone_number_id": fake.phone_number_id,
        "token_env": "SWITCHYARD_E2E_WA_TOKEN", "app_secret_env": "SWITCHYARD_E2E_WA_SECRET",
        "verify_token_env": "SWITCHYARD_E2E_WA_VERIFY", "webhook_port": port, "webhook_path": "/whatsapp/webhook"}]})
    switchyard.start()
    fake.webhook_url = f"http://127.0.0.1:{port}/whatsapp/webhook"

    challenge = whatsapp.call(fake.verify, token=fake.verify_token, challenge="31337")
    assert challenge == (200, "31337")
    sender, text = "15557654321", "hello from whatsapp"
    wamid = whatsapp.call(fake.user_says, text, sender_id=sender, sender="Ada")

    def replies() -> list[Any]:
        return [s for s in whatsapp.run(lambda: list(fake.recorded.sent)) if answer(text) in (s.text or "")]

    sent = wait_until(replies, REPLY_TIMEOUT_S)
    assert len(sent) == 1
    assert sent[0].conversation == sender and sent[0].reply_to == wamid
    finish(switchyard, "wa", fake.token, fake.app_secret, fake.verify_token)


# --- a missing token disables only its profile --------------------------------------------------------


def test_profiles_whose_token_variable_is_missing_are_disabled_and_the_rest_keeps_working(
    telegram: FakeThread[FakeTelegram], switchyard: Switchyard
) -> None:
    fake = telegram.server
    slack_bot_token = "xoxb-e2e-present-but-unused-0451"
    switchyard.env[TELEGRAM_ENV] = fake.token
    switchyard.env["SWITCHYARD_E2E_SLACK_BOT_SET"] = slack_bot_token
    missing = {"tg-broken": "SWITCHYARD_E2E_MISSING_TELEGRAM", "dc-broken": "SWITCHYARD_E2E_MISSING_DISCORD",
               "sl-broken": "SWITCHYARD_E2E_MISSING_SLACK_APP", "wa-broken": "SWITCHYARD_E2E_MISSING_WHATSAPP"}
    for variable in missing.values():
        switchyard.env.pop(variable, None)
    switchyard.configure({"channels": [
        telegram_profile(fake),
        telegram_profile(fake, "tg-broken", missing["tg-broken"]),
        {"id": "dc-broken", "type": "discord", "token_env": missing["dc-broken"],
         "api_base_url": "http://127.0.0.1:9/api/v10", "gateway_url": "ws://127.0.0.1:9/gw"},
        {"id": "sl-broken", "type": "slack", "mode": "socket", "api_base_url": "http://127.0.0.1:9/api/",
         "bot_token_env": "SWITCHYARD_E2E_SLACK_BOT_SET", "app_token_env": missing["sl-broken"]},
        {"id": "wa-broken", "type": "whatsapp", "api_base_url": "http://127.0.0.1:9/v21.0",
         "phone_number_id": "1", "token_env": missing["wa-broken"], "app_secret_env": missing["wa-broken"],
         "webhook_port": free_port()},
    ]})
    switchyard.start()

    for profile, variable in missing.items():
        entry = wait_for_state(switchyard, profile, "disabled")
        assert variable in entry["reason"], (profile, entry)
    # the events are written at the end of the turn that set the status: wait for them too
    wait_until(lambda: {e["profile"] for e in switchyard.events("channel.disabled")} >= set(missing), 10)
    disabled = {e["profile"]: e["reason"] for e in switchyard.events("channel.disabled")}
    assert set(disabled) == set(missing)

    text = "still answering on telegram"
    message = telegram.run(fake.message, 1002, text)
    telegram.call(fake.deliver, message)
    sent = wait_until(lambda: [s for s in telegram.run(lambda: list(fake.sent)) if answer(text) in (s.text or "")],
                      REPLY_TIMEOUT_S)
    assert sent[0].chat == "1002" and sent[0].reply_to == message["message_id"]

    dropped = switchyard.send("a dropped file still works", messageId="drop-1")
    assert answer(dropped["message"]) in switchyard.reply_to("drop-1", timeout=REPLY_TIMEOUT_S)[0]["message"]
    finish(switchyard, "tg", fake.token, slack_bot_token)


def test_a_reply_the_platform_refused_is_delivered_after_dead_retry(telegram: FakeThread[FakeTelegram],
                                                                     switchyard: Switchyard) -> None:
    fake = telegram.server
    switchyard.env[TELEGRAM_ENV] = fake.token
    switchyard.configure({"channels": [telegram_profile(fake)]})
    switchyard.start()
    telegram.run(fake.refuse_next)  # the user blocked the bot: the reply goes to failed/ at once
    text = "answer me later"
    telegram.call(fake.deliver, telegram.run(fake.message, 1001, text))

    def dead() -> list[dict[str, Any]]:
        letters: list[dict[str, Any]] = json.loads(switchyard.cli("dead", "list", "--json").stdout)
        return letters

    [letter] = wait_until(dead, REPLY_TIMEOUT_S)
    assert letter["kind"] == "reply" and "the platform refused it" in letter["reason"]
    assert letter["conversation"] == "1001"
    result = switchyard.cli("dead", "retry", letter["name"])  # the user unblocked the bot
    assert f"retried {letter['name']} → outgoing/" in result.stdout, result.stderr

    def replies() -> list[Any]:
        return [s for s in telegram.run(lambda: list(fake.sent)) if answer(text) in (s.text or "")]

    assert len(wait_until(replies, REPLY_TIMEOUT_S)) == 1
    wait_until(lambda: not dead() and json.loads(switchyard.cli("status", "--json").stdout)["queue"]["failed"] == 0,
               STATUS_TIMEOUT_S)
    finish(switchyard, "tg", fake.token)


def test_a_telegram_token_the_api_refuses_disables_the_profile_with_the_reason(
    telegram: FakeThread[FakeTelegram], switchyard: Switchyard
) -> None:
    wrong = "999999:WRONG-e2e-token-value"
    switchyard.env[TELEGRAM_ENV] = wrong  # the fake answers 401 Unauthorized to getMe with any other token
    switchyard.configure({"channels": [telegram_profile(telegram.server)]})
    switchyard.start()
    entry = wait_for_state(switchyard, "tg", "disabled")
    assert "rejected the bot token" in entry["reason"] and TELEGRAM_ENV in entry["reason"], entry
    assert switchyard.events("channel.retrying") == []
    assert [e["profile"] for e in switchyard.events("channel.disabled")] == ["tg"]
    status = switchyard.cli("status")
    assert "disabled" in status.stdout and "rejected the bot token" in status.stdout, status.stdout
    assert switchyard.stop() == 0
    assert_secrets_not_written(switchyard, wrong)


def test_a_discord_token_the_api_refuses_disables_the_profile_with_the_reason(
    discord: FakeThread[DiscordFakeServer], switchyard: Switchyard
) -> None:
    fake = discord.server
    switchyard.env["SWITCHYARD_E2E_DISCORD_TOKEN"] = "wrong-e2e-discord-token"  # the fake answers 401
    switchyard.configure({"channels": [{"id": "dc", "type": "discord", "token_env": "SWITCHYARD_E2E_DISCORD_TOKEN",
                                        "api_base_url": fake.api_base_url, "gateway_url": fake.gateway_url}]})
    switchyard.start()
    entry = wait_for_state(switchyard, "dc", "disabled")
    assert "rejected the token in SWITCHYARD_E2E_DISCORD_TOKEN" in entry["reason"], entry
    assert switchyard.events("channel.retrying") == []
    assert switchyard.stop() == 0
    assert_secrets_not_written(switchyard, "wrong-e2e-discord-token")
