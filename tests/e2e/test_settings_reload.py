"""settings.yaml edited while `switchyard run` runs (issue 32 §10): providers, usage limits, `transcribe` and each
profile's `allow_from` are applied without a restart; an edit that does not validate keeps the last valid settings
and `status` names the problem; a change read only at start (a channel, the queue) is named in `status` as waiting
for a restart; `dead retry` waits for the gateway to read an edit and warns when it still runs older settings."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.cli.statuscache import file_digest
from gateway.testing import wait_until
from tests.e2e.conftest import PROVIDERS as SCRIPTS
from tests.e2e.conftest import Switchyard, both_backends
from tests.e2e.fake_thread import FakeThread
from tests.e2e.test_channels import (
    TELEGRAM_ENV,
    answer,
    telegram,  # noqa: F401  (a fixture)
    telegram_profile,
)
from tests.fakes.audio import fake_transcriber, spoken_ogg
from tests.fakes.telegram_server import FakeTelegram

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

READ_TIMEOUT_S = 15  # the gateway looks at settings.yaml every 2 s
NEW_AGENT = [sys.executable, "-c", "import sys; sys.stdin.read(); print('the new agent answered')"]
BROKEN_SELECTOR = [sys.executable, "-c", "import sys; sys.exit('selector: cannot reach the model')"]
PROVIDERS = {  # the e2e harness's own (tests/e2e/conftest.py)
    "fake_selector": {"command": [sys.executable, str(SCRIPTS / "selector.py")], "timeout_sec": 30},
    "fake_agent": {"command": [sys.executable, str(SCRIPTS / "agent.py")], "timeout_sec": 30},
    "fake_diagnostics": {"command": [sys.executable, str(SCRIPTS / "diagnostics.py")]},
}


def edit_settings(switchyard: Switchyard, change: Callable[[dict[str, Any]], None]) -> None:
    """Rewrites settings.yaml as a person would: read it, change it, write it back."""
    data = yaml.safe_load(switchyard.home.settings_file.read_text())
    change(data)
    switchyard.home.settings_file.write_text(yaml.safe_dump(data))


def status(switchyard: Switchyard) -> dict[str, Any]:
    shown = switchyard.cli("status", "--json")
    assert shown.returncode in (0, 2), shown.stderr
    result: dict[str, Any] = json.loads(shown.stdout)
    return result


def read_by_gateway(switchyard: Switchyard) -> dict[str, Any]:
    """Waits until the running gateway's status file (what `status` shows) says it read settings.yaml as it is
    now; its record of it."""
    digest = file_digest(switchyard.home.settings_file)

    def read() -> dict[str, Any] | None:
        try:
            seen: dict[str, Any] = json.loads((switchyard.home.state / "gateway.json").read_text())["settings"]
        except (OSError, ValueError, KeyError):
            return None
        return seen if seen.get("sha256") == digest else None

    found: dict[str, Any] = wait_until(read, READ_TIMEOUT_S, interval_s=0.2)
    return found


def answer_text(switchyard: Switchyard, text: str, message_id: str) -> str:
    switchyard.send(text, messageId=message_id)
    return str(switchyard.reply_to(message_id, timeout=30)[0]["message"])


def test_a_provider_changed_while_running_answers_the_next_message(switchyard: Switchyard) -> None:
    switchyard.configure()
    switchyard.start()
    pid = status(switchyard)["gateway"]["pid"]
    assert "agent Reply answered" in answer_text(switchyard, "hello", "before")

    edit_settings(switchyard, lambda data: data["providers"]["fake_agent"].update(command=NEW_AGENT))
    seen = read_by_gateway(switchyard)

    assert seen["problem"] is None and seen["restart_needed"] == []
    assert "the new agent answered" in answer_text(switchyard, "hello again", "after")
    assert status(switchyard)["gateway"]["pid"] == pid  # no restart
    [reloaded] = switchyard.events("settings.reloaded")
    assert reloaded["applied"] == ["providers"]
    assert "settings.yaml reloaded: providers applied" in switchyard.output()


def test_an_invalid_edit_keeps_the_last_valid_settings_and_status_names_it(switchyard: Switchyard) -> None:
    switchyard.configure()
    switchyard.start()

    edit_settings(switchyard, lambda data: data["providers"]["fake_agent"].update(command=NEW_AGENT, timeout_sec=0))
    seen = read_by_gateway(switchyard)

    assert "providers.fake_agent.timeout_sec" in seen["problem"]
    assert "agent Reply answered" in answer_text(switchyard, "still here", "kept")  # the old agent answers
    shown = switchyard.cli("status")
    assert shown.returncode == 2 and "invalid settings" in shown.stderr  # as every command says
    assert "gateway: running" in shown.stdout
    assert "settings: the running gateway keeps its last valid settings" in shown.stdout
    assert "providers.fake_agent.timeout_sec" in shown.stdout
    assert switchyard.events("settings.rejected")
    assert "the gateway keeps its last valid settings" in switchyard.output()

    edit_settings(switchyard, lambda data: data["providers"]["fake_agent"].update(timeout_sec=30))
    assert read_by_gateway(switchyard)["problem"] is None
    assert "the new agent answered" in answer_text(switchyard, "fixed", "fixed")
    assert switchyard.cli("status").returncode == 0


def test_an_unreadable_edit_is_named_with_the_running_gateway_that_keeps_its_settings(
        switchyard: Switchyard) -> None:
    switchyard.configure()
    switchyard.start()
    text = switchyard.home.settings_file.read_text()
    switchyard.home.settings_file.write_text(text.replace("providers:", "providers: {", 1))  # never closed
    seen = read_by_gateway(switchyard)

    assert "invalid YAML" in seen["problem"]
    shown = switchyard.cli("status")
    assert shown.returncode == 2 and "invalid YAML" in shown.stderr
    assert "the running gateway, pid" in shown.stderr and "keeps its last valid settings" in shown.stderr
    assert "agent Reply answered" in answer_text(switchyard, "still here", "kept")


def test_a_changed_channel_is_named_in_status_as_waiting_for_a_restart(switchyard: Switchyard) -> None:
    switchyard.configure({"channels": [{"id": "beat", "type": "heartbeat", "interval_sec": 3600}]})
    switchyard.start()

    def change(data: dict[str, Any]) -> None:
        data["channels"][0]["interval_sec"] = 60
        data["channels"].append({"id": "beat2", "type": "heartbeat", "interval_sec": 3600})
        data["queue"]["poll_ms"] = 100
        data["providers"]["fake_agent"]["command"] = NEW_AGENT

    edit_settings(switchyard, change)
    seen = read_by_gateway(switchyard)

    assert seen["restart_needed"] == ["queue.poll_ms", "channel beat2 added", "channel beat: interval_sec"]
    shown = switchyard.cli("status")
    assert shown.returncode == 0, shown.stderr
    assert ("settings: restart the gateway to apply: queue.poll_ms; channel beat2 added; "
            "channel beat: interval_sec") in shown.stdout
    assert "beat2" not in status(switchyard)["gateway"]["channels"]  # not started
    assert "the new agent answered" in answer_text(switchyard, "hi", "applied")  # the rest is applied
    assert "need a restart of the gateway to apply: queue.poll_ms" in switchyard.output()


@both_backends
def test_dead_retry_after_fixing_a_provider_is_answered_by_the_fixed_one(switchyard: Switchyard) -> None:
    """The user's story: a provider fails, its message is dead; settings.yaml is fixed and `dead retry` run at
    once: the retry waits for the gateway to read the fix, and the message is answered."""
    switchyard.configure({"providers": {**PROVIDERS, "fake_selector": {"command": BROKEN_SELECTOR}}})
    switchyard.start()
    switchyard.send("deploy", messageId="deploy")
    wait_until(switchyard.dead_letters, 30)

    edit_settings(switchyard, lambda data: data.update(providers=PROVIDERS))
    retried = switchyard.cli("dead", "retry", "--all")

    assert retried.returncode == 0, retried.stderr
    answers = switchyard.reply_to("deploy", count=2, timeout=30)
    assert "agent Reply answered" in answers[1]["message"]
    assert "warning" not in retried.stderr


def test_dead_retry_warns_when_the_running_gateway_has_older_settings(switchyard: Switchyard) -> None:
    switchyard.configure({"providers": {**PROVIDERS, "fake_selector": {"command": BROKEN_SELECTOR}}})
    switchyard.start()
    switchyard.send("deploy", messageId="deploy")
    wait_until(switchyard.dead_letters, 30)

    edit_settings(switchyard, lambda data: data["queue"].update(poll_ms=100))
    retried = switchyard.cli("dead", "retry", "--all")
    assert retried.returncode == 0, retried.stderr
    assert "switchyard: warning: settings: restart the gateway to apply: queue.poll_ms" in retried.stderr

    wait_until(switchyard.dead_letters, 30)  # the selector still fails
    edit_settings(switchyard, lambda data: data["providers"].pop("fake_diagnostics"))  # orchestrator.yaml uses it
    retried = switchyard.cli("dead", "retry", "--all")
    assert retried.returncode == 0, retried.stderr
    assert "switchyard: warning: settings: the running gateway keeps its last valid settings" in retried.stderr
    assert "fake_diagnostics" in retried.stderr


def sent_with(telegram: FakeThread[FakeTelegram], text: str) -> list[Any]:  # noqa: F811
    """The messages the bot sent on the fake Telegram that hold `text`."""
    return [sent for sent in telegram.run(lambda: list(telegram.server.sent)) if text in (sent.text or "")]


def test_allow_from_edited_while_running_admits_the_sender(telegram: FakeThread[FakeTelegram],  # noqa: F811
                                                           switchyard: Switchyard) -> None:
    fake = telegram.server
    switchyard.env[TELEGRAM_ENV] = fake.token
    switchyard.configure({"channels": [{**telegram_profile(fake), "allow_from": ["1001"]}]})
    switchyard.start()
    telegram.call(fake.deliver, telegram.run(fake.message, 1002, "let me in", user_id=1002, first_name="Bob"))
    wait_until(lambda: switchyard.events("message.rejected"), 30)

    edit_settings(switchyard, lambda data: data["channels"][0].update(allow_from=["1001", "1002"]))
    seen = read_by_gateway(switchyard)
    assert seen["restart_needed"] == []
    telegram.call(fake.deliver, telegram.run(fake.message, 1002, "and now?", user_id=1002, first_name="Bob"))

    sent = wait_until(lambda: sent_with(telegram, answer("and now?")), 30)
    assert sent[0].chat == "1002"
    assert not sent_with(telegram, answer("let me in"))
    assert switchyard.events("settings.reloaded")[-1]["applied"] == ["channels.tg.allow_from"]


def test_a_usage_limit_added_while_running_applies_to_the_next_message(switchyard: Switchyard) -> None:
    switchyard.configure()
    switchyard.start()
    assert "agent Reply answered" in answer_text(switchyard, "one", "one")

    edit_settings(switchyard, lambda data: data.update(usage={"limits": [{"per": "sender", "day": {"turns": 1}}]}))
    read_by_gateway(switchyard)

    assert answer_text(switchyard, "two", "two").startswith("You have reached the daily limit of 1 turn per sender")


def test_transcribe_added_while_running_reads_the_next_voice_note(telegram: FakeThread[FakeTelegram],  # noqa: F811
                                                                  switchyard: Switchyard, tmp_path: Path) -> None:
    fake, note = telegram.server, spoken_ogg("ship it on friday", tmp_path)
    switchyard.env[TELEGRAM_ENV] = fake.token
    switchyard.configure({"channels": [telegram_profile(fake)]})
    switchyard.start()

    telegram.call(fake.deliver, telegram.run(fake.message, 1001, voice=(note, 7)))
    wait_until(lambda: sent_with(telegram, "I cannot read voice notes yet"), 30)

    command = fake_transcriber(tmp_path, {note: "ship it on friday"})
    edit_settings(switchyard, lambda data: data.update(transcribe={"command": command, "timeout_sec": 30}))
    read_by_gateway(switchyard)
    telegram.call(fake.deliver, telegram.run(fake.message, 1001, voice=(note, 7)))

    wait_until(lambda: sent_with(telegram, answer("[voice 0:07] ship it on friday")), 30)
    assert switchyard.events("settings.reloaded")[-1]["applied"] == ["transcribe"]
