"""Streamed answers end to end: `switchyard run` as a process, a chat platform faked, and the answer written by
the fake claude CLI (`--include-partial-messages`) from a fake model server that streams it in pieces.

On Telegram, Discord and Slack the user sees one reply that grows while the model writes and ends as the whole
answer; on WhatsApp only the whole answer arrives; a gateway killed between preview and answer still ends
with that one message holding the answer (Telegram on both queue backends).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.testing import wait_until
from tests.e2e.conftest import Switchyard, both_backends
from tests.e2e.fake_thread import FakeThread
from tests.e2e.test_channels import free_port, telegram_profile
from tests.fakes.clis import FOLDER as FAKE_CLIS
from tests.fakes.discord_server import DiscordFakeServer
from tests.fakes.model_server import ModelServer
from tests.fakes.slack_server import FakeSlack
from tests.fakes.telegram_server import FakeTelegram
from tests.fakes.whatsapp_server import FakeWhatsApp
from tests.process import kill_session

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

ANSWER = "The quick brown fox jumps over the lazy dog, then it runs off into the woods and is gone."
KEY_VARIABLE = "SWITCHYARD_E2E_MODEL_KEY"
REPLY_TIMEOUT_S = 40
ORCHESTRATOR: dict[str, Any] = {
    "selector": {"provider": "rules"}, "diagnostics": {"provider": "rules"}, "rules": {"default_workflow": "chat"},
    "reply_within_sec": 30, "stream_after_sec": 0.3, "stream_interval_sec": 0.4,
    "agents": {"helper": {"provider": "writer", "prompt": "{{message}}"}},
    "workflows": {"chat": {"description": "Reply", "steps": [{"id": "Reply", "agent": "helper"}]}},
}

Shown = Callable[[], tuple[list[tuple[str, str]], list[tuple[str, str]]]]
"""What the bot posted in the conversation (message id, first text) and its edits (message id, new text)."""


@pytest.fixture
def model() -> Iterator[FakeThread[ModelServer]]:
    """The model API: the answer in 6 pieces, 0.5 s apart."""
    with FakeThread(lambda: ModelServer(ANSWER, chunks=6, chunk_delay=0.5)) as fake:
        yield fake


def _configure(switchyard: Switchyard, tmp_path: Path, model: FakeThread[ModelServer],
               channel: dict[str, Any]) -> None:
    user_home = tmp_path / "user-home"
    user_home.mkdir(exist_ok=True)
    switchyard.env.update(PATH=f"{FAKE_CLIS}{os.pathsep}{switchyard.env.get('PATH', '')}", HOME=str(user_home),
                          FAKE_CLI_STATE=str(tmp_path / "fake-cli-state"), **{KEY_VARIABLE: "sk-ant-e2e"})
    writer = {"type": "claude", "base_url": model.server.url, "api_key_env": KEY_VARIABLE, "timeout_sec": 60}
    switchyard.configure({"providers": {"writer": writer}, "channels": [channel]}, ORCHESTRATOR)


def _shown(posted: list[tuple[str, str]], edits: list[tuple[str, str]]) -> list[str]:
    texts = dict(posted)
    for message_id, text in edits:
        texts[message_id] = text
    return list(texts.values())


def _assert_one_reply_grew_into_the_answer(shown: Shown) -> None:
    """Waits for the answer; then the bot posted one message, first a part of the answer, edited into all of it."""
    wait_until(lambda: ANSWER in _shown(*shown()), REPLY_TIMEOUT_S)
    posted, edits = shown()
    assert len(posted) == 1, posted  # no preview left beside a copy of the answer
    first = posted[0][1]
    assert ANSWER.startswith(first) and len(first) < len(ANSWER), f"no preview before the answer: {first!r}"
    assert edits[-1] == (posted[0][0], ANSWER)


@both_backends
def test_telegram_shows_the_answer_growing_in_one_message(
        switchyard: Switchyard, tmp_path: Path, model: FakeThread[ModelServer]) -> None:
    with FakeThread(FakeTelegram) as telegram:
        fake = telegram.server
        switchyard.env["SWITCHYARD_E2E_TELEGRAM_TOKEN"] = fake.token
        _configure(switchyard, tmp_path, model, telegram_profile(fake))
        switchyard.start()
        telegram.call(fake.deliver, telegram.run(fake.message, 1001, "tell me about the fox"))

        def shown() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
            return telegram.run(lambda: ([(f"{s.chat}:{s.message_id}", s.text) for s in fake.sent if s.text],
                                         [(f"{e.chat}:{e.message_id}", e.text) for e in fake.edits]))

        _assert_one_reply_grew_into_the_answer(shown)
        assert switchyard.stop() == 0


def test_discord_shows_the_answer_growing_in_one_message(
        switchyard: Switchyard, tmp_path: Path, model: FakeThread[ModelServer]) -> None:
    with FakeThread(DiscordFakeServer) as discord:
        fake = discord.server
        switchyard.env["SWITCHYARD_E2E_DISCORD_TOKEN"] = fake.token
        _configure(switchyard, tmp_path, model, {
            "id": "dc", "type": "discord", "token_env": "SWITCHYARD_E2E_DISCORD_TOKEN",
            "api_base_url": fake.api_base_url, "gateway_url": fake.gateway_url})
        switchyard.start()
        discord.call(fake.message_create, "4242", fake.user("1001", "Ada"), "tell me about the fox")

        def shown() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
            return discord.run(lambda: ([(m.id, m.content) for m in fake.sent if m.content],
                                        [(e.id, e.content) for e in fake.edits]))

        _assert_one_reply_grew_into_the_answer(shown)
        assert switchyard.stop() == 0


def test_slack_shows_the_answer_growing_in_one_message(
        switchyard: Switchyard, tmp_path: Path, model: FakeThread[ModelServer]) -> None:
    with FakeThread(FakeSlack) as slack:
        fake = slack.server
        switchyard.env.update(SWITCHYARD_E2E_SLACK_BOT=fake.bot_token, SWITCHYARD_E2E_SLACK_APP=fake.app_token)
        _configure(switchyard, tmp_path, model, {
            "id": "sl", "type": "slack", "mode": "socket", "api_base_url": f"{fake.url}/api/",
            "bot_token_env": "SWITCHYARD_E2E_SLACK_BOT", "app_token_env": "SWITCHYARD_E2E_SLACK_APP"})
        switchyard.start()
        slack.run(fake.users.__setitem__, "U1001", "Ada")
        slack.call(fake.deliver, slack.run(fake.message_event, "tell me about the fox", user="U1001",
                                           channel="C100"))

        def shown() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
            return slack.run(lambda: ([(ts, text) for ts, _, text in fake.posts],
                                      [(ts, text) for _, ts, text in fake.edits]))

        _assert_one_reply_grew_into_the_answer(shown)
        assert switchyard.stop() == 0


def test_whatsapp_gets_only_the_whole_answer(
        switchyard: Switchyard, tmp_path: Path, model: FakeThread[ModelServer]) -> None:
    with FakeThread(FakeWhatsApp) as whatsapp:
        fake = whatsapp.server
        switchyard.env.update(SWITCHYARD_E2E_WA_TOKEN=fake.token, SWITCHYARD_E2E_WA_SECRET=fake.app_secret,
                              SWITCHYARD_E2E_WA_VERIFY=fake.verify_token)
        port = free_port()
        _configure(switchyard, tmp_path, model, {
            "id": "wa", "type": "whatsapp", "api_base_url": fake.api_base_url,
            "phone_number_id": fake.phone_number_id, "token_env": "SWITCHYARD_E2E_WA_TOKEN",
            "app_secret_env": "SWITCHYARD_E2E_WA_SECRET", "verify_token_env": "SWITCHYARD_E2E_WA_VERIFY",
            "webhook_port": port, "webhook_path": "/whatsapp/webhook"})
        switchyard.start()
        fake.webhook_url = f"http://127.0.0.1:{port}/whatsapp/webhook"
        whatsapp.call(fake.user_says, "tell me about the fox", sender_id="15557654321", sender="Ada")

        def texts() -> list[str]:
            return whatsapp.run(lambda: [s.text for s in fake.recorded.sent if s.text])

        wait_until(lambda: ANSWER in texts(), REPLY_TIMEOUT_S)
        assert texts() == [ANSWER]
        skipped = switchyard.events("outgoing.skipped")
        assert skipped and all("cannot edit" in e["reason"] for e in skipped)  # the drafts were written
        assert switchyard.stop() == 0


@both_backends
def test_a_gateway_killed_between_preview_and_answer_still_ends_with_one_message_holding_the_answer(
        switchyard: Switchyard, tmp_path: Path) -> None:
    with FakeThread(lambda: ModelServer(ANSWER, chunks=6, chunk_delay=1.0)) as model, \
            FakeThread(FakeTelegram) as telegram:
        fake = telegram.server
        switchyard.env["SWITCHYARD_E2E_TELEGRAM_TOKEN"] = fake.token
        _configure(switchyard, tmp_path, model, telegram_profile(fake))
        switchyard.start()
        telegram.call(fake.deliver, telegram.run(fake.message, 1001, "tell me about the fox"))

        def shown() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
            return telegram.run(lambda: ([(f"{s.chat}:{s.message_id}", s.text) for s in fake.sent if s.text],
                                         [(f"{e.chat}:{e.message_id}", e.text) for e in fake.edits]))

        wait_until(lambda: shown()[0], REPLY_TIMEOUT_S)  # the preview is showing, the model still writing
        assert ANSWER not in _shown(*shown())
        preview_id = shown()[0][0][0].split(":")[1]
        wait_until(lambda: _remembers(switchyard, "tg", preview_id), REPLY_TIMEOUT_S)
        switchyard.kill()  # kill -9: the turn dies with it
        _kill_agents(tmp_path / "fake-cli-state")
        switchyard.start()
        _assert_one_reply_grew_into_the_answer(shown)
        assert len(model.run(lambda: list(model.server.model_calls))) == 2  # the turn ran again after the restart
        assert switchyard.stop() == 0


def _remembers(switchyard: Switchyard, profile_id: str, message_id: str) -> bool:
    """Whether the gateway has recorded that this platform message shows a note (state/notes/<profile>.json).

    The kill above waits for it: between the platform accepting a preview and its id reaching that file there
    is a window of one file write where a kill -9 leaves that preview behind, partial (docs/providers.md,
    "Streamed answers"); the answer is still delivered once."""
    notes = switchyard.home.state / "notes" / f"{profile_id}.json"
    with contextlib.suppress(FileNotFoundError, ValueError):
        return any(entry[2] == message_id or entry[2].endswith(f":{message_id}")
                   for entry in json.loads(notes.read_bytes()))
    return False


def _kill_agents(state: Path) -> None:
    """Kills the sessions of this test's fake CLIs that outlived the killed gateway (each agent runs in a session
    of its own) and waits until they are gone."""
    needle = f"FAKE_CLI_STATE={state}".encode()
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and needle in (entry / "environ").read_bytes().split(b"\0"):
                kill_session(int(entry.name))
