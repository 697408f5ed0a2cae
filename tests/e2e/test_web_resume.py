"""The web chat picks up where the tab left off: a reload in the middle of a streamed answer, and a gateway killed
with SIGKILL in the middle of one and started again (on both queue backends), both end with every message shown
once, in order."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest

from gateway.testing import wait_until
from tests.e2e.conftest import Switchyard, both_backends
from tests.e2e.fake_thread import FakeThread
from tests.e2e.test_streaming import _kill_agents
from tests.e2e.test_web_chat import CHROMIUM, REPLY_TIMEOUT_S, SHOWN, answers, chromium, configure, model, open_chat
from tests.fakes.model_server import ModelServer

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180),
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                                                 "(apt-get install chromium)")]
__all__ = ["chromium", "model"]  # the fixtures, shared with test_web_chat.py
QUESTION = "tell me about the fox"


def bubbles(page: Any) -> list[str]:
    """Every bubble's text, top to bottom (progress notes and receipts left out)."""
    return [t.strip() for t in page.locator("#messages .msg:not(.note) .body").all_inner_texts()]


def test_a_reload_in_the_middle_of_a_streamed_answer_shows_each_message_once(
        switchyard: Switchyard, tmp_path: Path, model: FakeThread[ModelServer], chromium: Any) -> None:
    from playwright.sync_api import expect

    chat = configure(switchyard, tmp_path, model)
    switchyard.start()
    page = open_chat(chromium, chat.printed_link())
    page.fill("#text", QUESTION)
    page.keyboard.press("Enter")
    expect(page.locator("#messages .msg.streaming")).to_have_count(1, timeout=REPLY_TIMEOUT_S * 1000)
    page.reload()
    expect(page.locator("#messages .msg.agent .body").last).to_have_text(SHOWN, timeout=REPLY_TIMEOUT_S * 1000)
    assert bubbles(page) == [QUESTION, SHOWN]
    seqs = page.locator("#messages .msg").evaluate_all("items => items.map(i => i.dataset.seq)")
    assert len(seqs) == len(set(seqs))
    assert switchyard.stop() == 0


@both_backends
def test_a_gateway_killed_in_the_middle_of_a_streamed_answer_ends_with_each_message_once_in_order(
        switchyard: Switchyard, tmp_path: Path, chromium: Any) -> None:
    from playwright.sync_api import expect

    with FakeThread(lambda: ModelServer(SHOWN, chunks=6, chunk_delay=1.0)) as slow:
        chat = configure(switchyard, tmp_path, slow)
        switchyard.start()
        page = open_chat(chromium, chat.printed_link())
        page.fill("#text", QUESTION)
        page.keyboard.press("Enter")
        streaming = page.locator("#messages .msg.streaming")
        expect(streaming).to_have_count(1, timeout=REPLY_TIMEOUT_S * 1000)
        preview = streaming.get_attribute("data-seq")
        wait_until(lambda: _remembers(switchyard, str(preview)), REPLY_TIMEOUT_S)  # (see test_streaming.py)
        switchyard.kill()
        _kill_agents(tmp_path / "fake-cli-state")
        expect(page.locator("#status")).to_contain_text("reconnecting")
        switchyard.start()
        expect(page.locator("#messages .msg.agent .body").last).to_have_text(SHOWN, timeout=REPLY_TIMEOUT_S * 1000)
        expect(page.locator("#messages .msg.streaming")).to_have_count(0)
        assert bubbles(page) == [QUESTION, SHOWN]
        assert answers(page) == [SHOWN]
        page.reload()  # and what the log holds, read afresh, is the same
        expect(page.locator("#messages .msg.agent .body").last).to_have_text(SHOWN)
        assert bubbles(page) == [QUESTION, SHOWN]
        assert len(slow.run(lambda: list(slow.server.model_calls))) == 2  # the turn ran again after the restart
        assert switchyard.stop() == 0


def _remembers(switchyard: Switchyard, seq: str) -> bool:
    """Whether the web profile's note memory names the preview the page shows (the kill waits for it)."""
    notes = switchyard.home.state / "notes" / "web.json"
    with contextlib.suppress(FileNotFoundError, ValueError):
        return any(entry[2] == seq for entry in json.loads(notes.read_bytes()))
    return False
