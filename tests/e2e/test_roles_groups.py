"""Platform groups end to end (`switchyard run` as a process, the Telegram Bot API faked): with `admin:
["group:admins"]` on the profile, an administrator of the group chat starts the edit workflow, while a member of
the same chat typing the same words is refused and no agent starts; the audit names the administrator. On both
backends."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from gateway.testing import wait_until
from tests.e2e.conftest import Switchyard, both_backends
from tests.e2e.fake_thread import FakeThread
from tests.e2e.test_channels import TELEGRAM_ENV, telegram_profile
from tests.e2e.test_roles import ORCHESTRATOR, REFUSED, _claude_calls, _settings
from tests.fakes.clis import FOLDER as FAKE_CLIS
from tests.fakes.telegram_server import FakeTelegram

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120), both_backends]

GROUP = -100500
ADMIN, MEMBER = 2, 3


@pytest.fixture
def telegram() -> Any:
    with FakeThread(FakeTelegram) as fake:
        yield fake


def test_a_chat_administrator_holds_admin_and_a_member_is_refused(
        telegram: FakeThread[FakeTelegram], switchyard: Switchyard, tmp_path: Path) -> None:
    fake = telegram.server
    telegram.run(lambda: fake.administrators.update({str(GROUP): {1: "creator", ADMIN: "administrator"}}))
    state = tmp_path / "fake-cli-state"
    state.mkdir()
    switchyard.env.update({TELEGRAM_ENV: fake.token, "FAKE_CLI_STATE": str(state),
                           "PATH": f"{FAKE_CLIS}{os.pathsep}{switchyard.env.get('PATH', '')}"})
    profile = {**telegram_profile(fake), "roles": {"admin": ["group:admins"]}, "default_role": "member"}
    switchyard.configure({**_settings(tmp_path), "channels": [profile]}, ORCHESTRATOR)
    switchyard.start()

    def said(user: int, text: str) -> int:
        message = telegram.run(fake.message, GROUP, text, user_id=user, first_name=f"user{user}")
        telegram.call(fake.deliver, message)
        return int(message["message_id"])

    def answer_to(message_id: int) -> str:
        sent = wait_until(lambda: [s for s in telegram.run(lambda: list(fake.sent))
                                   if s.reply_to == message_id and s.text], 30)
        return str(sent[0].text)

    member = said(MEMBER, "fix the login page")
    assert answer_to(member).startswith(REFUSED), answer_to(member)
    assert _claude_calls(state) == [], "a member's message started the edit agent"
    admin = said(ADMIN, "fix the login page")
    assert answer_to(admin) == "echo: fix the login page"
    assert len(_claude_calls(state)) == 1
    assert telegram.run(lambda: fake.calls.count("getChatAdministrators")) == 1  # cached for the chat

    records = json.loads(switchyard.cli("audit", "--json").stdout)
    assert [(r["action"], r["by"]) for r in records] == [("workflow.start_edit", f"telegram/tg/{ADMIN}")], records
    assert switchyard.stop() == 0, switchyard.log_path.read_text()
