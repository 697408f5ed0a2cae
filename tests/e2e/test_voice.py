"""Voice notes end to end: `switchyard run` as a process, each platform's fake sending a real OGG/Opus voice
note (espeak-ng speech) as its own voice or audio type, the fake transcriber, and the fake agent's reply
showing the text it read. Without `transcribe:` the sender is told, and the message is kept as a dead letter."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.testing import wait_until
from tests.e2e.conftest import Switchyard, both_backends
from tests.e2e.fake_thread import FakeThread
from tests.e2e.test_channels import (
    REPLY_TIMEOUT_S,
    TELEGRAM_ENV,
    discord,  # noqa: F401  (fixtures)
    finish,
    free_port,
    slack,  # noqa: F401
    telegram,  # noqa: F401
    telegram_profile,
    whatsapp,  # noqa: F401
)
from tests.fakes.audio import fake_transcriber, spoken_ogg
from tests.fakes.discord_server import DiscordFakeServer
from tests.fakes.slack_server import FakeSlack
from tests.fakes.telegram_server import FakeTelegram
from tests.fakes.whatsapp_server import FakeWhatsApp

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

SPOKEN = "what is left to do on the release"
HEARD = f"write about [voice 0:07] {SPOKEN}"  # what the fake agent answers about a 7-second note


def test_a_voice_note_from_each_platform_reaches_the_agent_as_text(
    telegram: FakeThread[FakeTelegram], discord: FakeThread[DiscordFakeServer],  # noqa: F811
    slack: FakeThread[FakeSlack], whatsapp: FakeThread[FakeWhatsApp],  # noqa: F811
    switchyard: Switchyard, tmp_path: Path,
) -> None:
    data = spoken_ogg(SPOKEN, tmp_path)
    tg, dc, sl, wa = telegram.server, discord.server, slack.server, whatsapp.server
    switchyard.env.update({TELEGRAM_ENV: tg.token, "E2E_DC": dc.token, "E2E_SL_BOT": sl.bot_token,
                           "E2E_SL_APP": sl.app_token, "E2E_WA": wa.token, "E2E_WA_SECRET": wa.app_secret})
    port = free_port()
    switchyard.configure({"transcribe": {"command": fake_transcriber(tmp_path, {data: SPOKEN}), "timeout_sec": 30},
                          "channels": [
        telegram_profile(tg),
        {"id": "dc", "type": "discord", "token_env": "E2E_DC", "api_base_url": dc.api_base_url,
         "gateway_url": dc.gateway_url},
        {"id": "sl", "type": "slack", "mode": "socket", "api_base_url": f"{sl.url}/api/",
         "bot_token_env": "E2E_SL_BOT", "app_token_env": "E2E_SL_APP"},
        {"id": "wa", "type": "whatsapp", "api_base_url": wa.api_base_url, "phone_number_id": wa.phone_number_id,
         "token_env": "E2E_WA", "app_secret_env": "E2E_WA_SECRET", "webhook_port": port,
         "webhook_path": "/whatsapp/webhook"}]})
    switchyard.start()
    wa.webhook_url = f"http://127.0.0.1:{port}/whatsapp/webhook"

    telegram.call(tg.deliver, telegram.run(tg.message, 1001, voice=(data, 7)))
    discord.call(dc.message_create, "4242", dc.user("1001", "Ada"), "", voice=(data, 7.0))
    slack.run(sl.users.__setitem__, "U1001", "Ada")
    clip = {**slack.run(sl.add_file, "audio_message.ogg", data, "audio/ogg"), "duration_ms": 7000}
    slack.call(sl.deliver, slack.run(sl.message_event, "", user="U1001", channel="C100", files=[clip]))
    note = whatsapp.run(_whatsapp_voice, wa, data)
    assert whatsapp.call(wa.post_event, wa.event([note])) == 200

    def heard() -> dict[str, list[str]]:
        texts = {"tg": [s.text or "" for s in telegram.run(lambda: list(tg.sent))],
                 "dc": [m.content or "" for m in discord.run(lambda: list(dc.sent))],
                 "sl": [s.text or "" for s in slack.run(lambda: list(sl.sent))],
                 "wa": [s.text or "" for s in whatsapp.run(lambda: list(wa.recorded.sent))]}
        return {profile: found for profile, found in texts.items() if any(SPOKEN in text for text in found)}

    answers = wait_until(lambda: len(found := heard()) == 4 and found, REPLY_TIMEOUT_S)
    for profile in ("tg", "dc", "sl"):
        assert any(HEARD in text for text in answers[profile]), (profile, answers[profile])
    assert any("write about [voice 0:0" in text and SPOKEN in text for text in answers["wa"]), answers["wa"]
    events = switchyard.events("voice.transcribed")
    assert sorted(e["channel"] for e in events) == ["discord", "slack", "telegram", "whatsapp"]
    finish(switchyard, "tg", tg.token, dc.token, sl.bot_token, sl.app_token, wa.token, wa.app_secret)


def _whatsapp_voice(fake: FakeWhatsApp, data: bytes) -> dict[str, Any]:
    """A WhatsApp voice note (type audio, `voice: true`) carrying `data`, as the webhook delivers it."""
    message = fake.message("", kind="audio", mime_type="audio/ogg; codecs=opus")
    message["audio"]["voice"] = True
    fake.media[message["audio"]["id"]].data = data
    return message


@both_backends
def test_without_transcribe_the_sender_is_told_and_the_voice_note_is_kept(
    telegram: FakeThread[FakeTelegram], switchyard: Switchyard, tmp_path: Path,  # noqa: F811
) -> None:
    data = spoken_ogg(SPOKEN, tmp_path)
    fake = telegram.server
    switchyard.env[TELEGRAM_ENV] = fake.token
    switchyard.configure({"channels": [telegram_profile(fake)]})
    switchyard.start()
    message = telegram.run(fake.message, 1001, voice=(data, 7))
    telegram.call(fake.deliver, message)

    def told() -> list[Any]:
        return [s for s in telegram.run(lambda: list(fake.sent)) if "voice notes need `transcribe:`" in (s.text or "")]

    [reply] = wait_until(told, REPLY_TIMEOUT_S)
    assert reply.chat == "1001" and reply.reply_to == message["message_id"]
    [letter] = wait_until(switchyard.dead_letters, REPLY_TIMEOUT_S)
    assert letter.kind == "message" and "no `transcribe:`" in letter.reason and letter.attempts == 1
    finish(switchyard, "tg", fake.token)


@both_backends
def test_a_failing_transcriber_is_retried_then_the_sender_gets_its_error(
    telegram: FakeThread[FakeTelegram], switchyard: Switchyard, tmp_path: Path,  # noqa: F811
) -> None:
    data = spoken_ogg(SPOKEN, tmp_path)
    fake = telegram.server
    switchyard.env[TELEGRAM_ENV] = fake.token
    switchyard.configure({"transcribe": [*fake_transcriber(tmp_path, {data: SPOKEN}), "--fail"],
                          "channels": [telegram_profile(fake)]})  # queue.max_attempts: 3 (tests/e2e/conftest.py)
    switchyard.start()
    telegram.call(fake.deliver, telegram.run(fake.message, 1001, voice=(data, 7)))

    def told() -> list[Any]:
        return [s for s in telegram.run(lambda: list(fake.sent)) if "could not transcribe" in (s.text or "")]

    [reply] = wait_until(told, REPLY_TIMEOUT_S)
    assert reply.text == ("I could not transcribe your voice note: transcribe exited with code 2: "
                          "whisper: failed to load model 'ggml-base.en.bin'")
    [letter] = wait_until(switchyard.dead_letters, REPLY_TIMEOUT_S)
    assert letter.attempts == 3 and "failed 3 time(s)" in letter.reason
    assert len(switchyard.events("job.failed.retryable")) == 2
    assert [s for s in telegram.run(lambda: list(fake.sent)) if SPOKEN in (s.text or "")] == []
    finish(switchyard, "tg", fake.token)


def test_check_names_a_transcribe_setting_that_cannot_work(switchyard: Switchyard) -> None:
    switchyard.configure({"transcribe": {"command": ["no-such-whisper-cli-e2e", "-f", "{file}"]}})
    result = switchyard.cli("check")
    assert result.returncode != 0
    assert "transcribe.command: `no-such-whisper-cli-e2e` not found on PATH" in result.stdout + result.stderr
    switchyard.configure({"transcribe": {"command": []}})
    result = switchyard.cli("check")
    assert result.returncode != 0 and "transcribe.command" in result.stdout + result.stderr
