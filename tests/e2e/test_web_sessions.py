"""Signing out of the web chat, in headless Chromium against `switchyard run`: the page's Sign out ends the
session on the server (the old cookie opens nothing), and `switchyard web revoke NAME` signs a person out from
the terminal, their open tab told so at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Switchyard
from tests.e2e.fake_thread import FakeThread
from tests.e2e.test_web_chat import CHROMIUM, chromium, configure, model, open_chat
from tests.fakes.model_server import ModelServer

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120),
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                                                 "(apt-get install chromium)")]
__all__ = ["chromium", "model"]
SIGNED_OUT = "signed out: open a new chat link to sign in again"


def test_sign_out_in_the_page_and_revoke_from_the_terminal_end_the_session_at_once(
        switchyard: Switchyard, tmp_path: Path, model: FakeThread[ModelServer], chromium: Any) -> None:
    from playwright.sync_api import expect

    chat = configure(switchyard, tmp_path, model)
    switchyard.start()
    ada = open_chat(chromium, chat.printed_link())
    bob = open_chat(chromium, chat.link_for("bob"))
    listed = switchyard.cli("web", "sessions")
    assert listed.returncode == 0 and {"ada", "bob"} <= set(listed.stdout.split()), listed.stdout

    bob.click("#logout")
    expect(bob.locator("#status")).to_contain_text(SIGNED_OUT)
    expect(bob.locator("#text")).to_be_disabled()
    assert bob.reload().status == 401  # the browser's cookie is gone
    assert bob.evaluate("async () => (await fetch('/api/me')).status") == 401

    revoked = switchyard.cli("web", "revoke", "ada")
    assert revoked.returncode == 0 and "revoked 1 session" in revoked.stdout, revoked.stdout + revoked.stderr
    expect(ada.locator("#status")).to_contain_text(SIGNED_OUT, timeout=3000)  # her open tab: closed at once
    expect(ada.locator("#text")).to_be_disabled()
    assert ada.evaluate("async () => (await fetch('/api/me')).status") == 401  # her cookie opens nothing now
    assert switchyard.cli("web", "revoke", "ada").returncode == 1  # nothing left to revoke: said so
    assert switchyard.stop() == 0


def test_a_tab_past_the_limit_a_person_may_hold_says_so_in_the_page(
        switchyard: Switchyard, tmp_path: Path, model: FakeThread[ModelServer], chromium: Any) -> None:
    from playwright.sync_api import expect

    chat = configure(switchyard, tmp_path, model, max_tabs_per_user=1)
    switchyard.start()
    first = open_chat(chromium, chat.printed_link())
    expect(first.locator("#status")).to_be_empty()  # connected
    second = first.context.new_page()  # the same person (her cookie), a second tab
    second.goto(chat.url)
    expect(second.locator("#status")).to_contain_text("as many tabs of this chat open as one person may (1)")
    first.fill("#text", "still works here")
    first.keyboard.press("Enter")
    expect(first.locator("#messages .msg.user .body")).to_have_text("still works here")
    assert switchyard.stop() == 0
