"""The quick start: a fresh home with no settings.yaml, `switchyard run`, and the chat link it prints opens a
working chat in the browser, answered by the built-in provider; the dashboard links to the chat, the chat to
the dashboard."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from gateway.testing import wait_until
from tests.e2e.conftest import Switchyard
from tests.e2e.dashboard import start_with_dashboard
from tests.e2e.test_channels import free_port
from tests.e2e.test_web_chat import ARTIFACTS, CHROMIUM, LINK, chromium, open_chat

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120),
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                                                 "(apt-get install chromium)")]
__all__ = ["chromium"]
README_SHOT = Path(__file__).resolve().parents[2] / "docs" / "img" / "web-chat.png"


def test_with_no_settings_the_printed_link_opens_a_chat_answered_by_the_built_in_provider(
        switchyard: Switchyard, chromium: Any) -> None:
    from playwright.sync_api import expect

    switchyard.home.root.mkdir(parents=True)  # a fresh home: no settings.yaml, the embedded default
    switchyard.start()
    link = str(wait_until(lambda: LINK.findall(switchyard.output()), 20)[-1])
    assert link.startswith("http://127.0.0.1:")
    page = open_chat(chromium, link)
    page.fill("#text", "hello, what can you do?")
    page.keyboard.press("Enter")
    answer = page.locator("#messages .msg.agent .body").last
    expect(answer).not_to_be_empty(timeout=30_000)
    page.fill("#text", "/help")
    page.keyboard.press("Enter")
    expect(page.locator("#messages .msg.agent")).to_have_count(2, timeout=30_000)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "web-quickstart.png"))
    if os.environ.get("SWITCHYARD_REFRESH_SCREENSHOTS"):  # the README's picture, refreshed from this run
        shutil.copyfile(ARTIFACTS / "web-quickstart.png", README_SHOT)
    assert switchyard.stop() == 0


def test_the_dashboard_links_to_the_chat_and_the_chat_to_the_dashboard(switchyard: Switchyard, chromium: Any) -> None:
    from playwright.sync_api import expect

    dashboard_port = free_port()
    url = start_with_dashboard(switchyard, channels=[{"id": "web", "type": "web", "port": 0}], port=dashboard_port)
    board = chromium.new_context().new_page()
    board.goto(url)
    chat_link = board.locator("#channels a", has_text="open the web chat")
    expect(chat_link).to_have_count(1)
    chat_url = str(chat_link.get_attribute("href"))
    printed = str(wait_until(lambda: LINK.findall(switchyard.output()), 20)[-1])
    assert printed.startswith(chat_url)
    page = open_chat(chromium, printed)
    expect(page.locator("#dashboard")).to_have_attribute("href", f"http://127.0.0.1:{dashboard_port}/")
    assert switchyard.stop() == 0


def test_an_agents_ask_shows_its_options_as_buttons_and_the_tap_continues_the_run(
        switchyard: Switchyard, chromium: Any) -> None:
    """The embedded default's demo agent asks through the `ask` chat tool; the person taps an option in the page."""
    from playwright.sync_api import expect

    switchyard.home.root.mkdir(parents=True)
    switchyard.start()
    page = open_chat(chromium, str(wait_until(lambda: LINK.findall(switchyard.output()), 20)[-1]))
    page.fill("#text", "demo please")
    page.keyboard.press("Enter")
    question = page.locator("#messages .msg.agent", has_text="Shall I send you a file too?")
    expect(question.get_by_role("button")).to_have_count(2, timeout=30_000)
    assert question.get_by_role("button").all_inner_texts() == ["Yes, send it", "No, thanks"]
    question.get_by_role("button", name="No, thanks").click()
    expect(question.locator(".answered")).to_have_text("answered: No, thanks")
    expect(question.locator(".buttons")).to_have_count(0)
    expect(page.locator("#messages .msg.agent", has_text="demo step ran")).to_have_count(1, timeout=30_000)
    # the agent got "No, thanks" (an unanswered question, "no answer", would have had it send a file)
    assert [e["tool"] for e in switchyard.events("chat_tool.called")] == ["conversation_info", "send_message", "ask"]
    assert page.locator("#messages a.file").count() == 0
    assert switchyard.stop() == 0
