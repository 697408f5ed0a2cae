"""The web chat in headless Chromium (Debian's `chromium`, driven by Playwright) against `switchyard run` as a
process, the answer written by the fake claude CLI from a fake model server that streams it in pieces.

A person opens the link `switchyard run` printed, types, and sees the answer grow in one bubble and end as the
whole answer; markup anyone types or the agent writes stays text; a second person sees none of the first's
conversations; no cookie, a forged one, a page of another origin posting or opening the WebSocket get nothing.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gateway.testing import wait_until
from tests.e2e.conftest import Switchyard
from tests.e2e.fake_thread import FakeThread
from tests.e2e.test_channels import free_port
from tests.fakes.clis import FOLDER as FAKE_CLIS
from tests.fakes.model_server import ModelServer

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180),
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                                                 "(apt-get install chromium)")]

ANSWER = ("The **quick** brown fox <script>window.pwned = 1</script> jumps over the lazy dog, then it runs off "
          "into the woods and is gone.")
SHOWN = ANSWER.replace("**", "")  # the bold is an element; the script tag stays text
KEY_VARIABLE = "SWITCHYARD_E2E_MODEL_KEY"
REPLY_TIMEOUT_S = 40
ORCHESTRATOR: dict[str, Any] = {
    "selector": {"provider": "rules"}, "diagnostics": {"provider": "rules"}, "rules": {"default_workflow": "chat"},
    "reply_within_sec": 30, "stream_after_sec": 0.3, "stream_interval_sec": 0.4,
    "agents": {"helper": {"provider": "writer", "prompt": "{{message}}"}},
    "workflows": {"chat": {"description": "Reply", "steps": [{"id": "Reply", "agent": "helper"}]}},
}
LINK = re.compile(r"chat: (http://\S+)")


class Chat:
    """The gateway with a web profile, and what a test reads of it."""

    def __init__(self, switchyard: Switchyard, port: int):
        self.switchyard = switchyard
        self.url = f"http://127.0.0.1:{port}/"

    def printed_link(self) -> str:
        """The last login link `switchyard run` printed."""
        links = wait_until(lambda: LINK.findall(self.switchyard.output()), 20)
        return str(links[-1])

    def link_for(self, user: str) -> str:
        done = self.switchyard.cli("web", "link", "--user", user)
        assert done.returncode == 0, done.stderr
        found = LINK.search(done.stdout)
        assert found is not None, done.stdout
        return found.group(1)

    def log(self, conversation: str) -> list[dict[str, Any]]:
        import json

        user, _, number = conversation.rpartition(":")
        path = self.switchyard.home.state / "web" / "web" / "log" / user / f"{number}.jsonl"
        return [json.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


def configure(switchyard: Switchyard, tmp_path: Path, model: FakeThread[ModelServer], **web: Any) -> Chat:
    user_home = tmp_path / "user-home"
    user_home.mkdir(exist_ok=True)
    switchyard.env.update(PATH=f"{FAKE_CLIS}{os.pathsep}{switchyard.env.get('PATH', '')}", HOME=str(user_home),
                          FAKE_CLI_STATE=str(tmp_path / "fake-cli-state"), **{KEY_VARIABLE: "sk-ant-e2e"})
    writer = {"type": "claude", "base_url": model.server.url, "api_key_env": KEY_VARIABLE, "timeout_sec": 60}
    port = free_port()
    channel = {"id": "web", "type": "web", "port": port, "user": "ada", **web}
    switchyard.configure({"providers": {"writer": writer}, "channels": [channel]}, ORCHESTRATOR)
    return Chat(switchyard, port)


@pytest.fixture
def model() -> Iterator[FakeThread[ModelServer]]:
    """The model API: the answer in 6 pieces, 0.5 s apart."""
    with FakeThread(lambda: ModelServer(ANSWER, chunks=6, chunk_delay=0.5)) as fake:
        yield fake


@pytest.fixture
def chromium() -> Iterator[Any]:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=15_000)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM))
        yield browser
        browser.close()


def open_chat(chromium: Any, link: str) -> Any:
    """A new browser profile (its own cookies) on the chat, signed in with `link`."""
    from playwright.sync_api import expect

    page = chromium.new_context(viewport={"width": 1100, "height": 760}).new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(link)
    expect(page.locator("#who")).not_to_be_empty()
    assert "?t=" not in page.url  # the token left the address bar
    return page


def answers(page: Any) -> list[str]:
    """The text of each of the agent's bubbles (notes and receipts left out)."""
    return [text.strip() for text in page.locator("#messages .msg.agent:not(.note) .body").all_inner_texts()]


def test_a_person_types_and_sees_the_answer_grow_in_one_bubble_markup_staying_text(
        switchyard: Switchyard, tmp_path: Path, model: FakeThread[ModelServer], chromium: Any) -> None:
    from playwright.sync_api import expect

    chat = configure(switchyard, tmp_path, model)
    switchyard.start()
    page = open_chat(chromium, chat.printed_link())
    page.fill("#text", "tell me about the <script>window.pwned = 2</script> fox")
    page.keyboard.press("Enter")
    expect(page.locator("#messages .msg.user .body")).to_have_text("tell me about the "
                                                                   "<script>window.pwned = 2</script> fox")
    expect(page.locator("#typing")).to_be_visible(timeout=REPLY_TIMEOUT_S * 1000)  # the turn runs
    streaming = page.locator("#messages .msg.streaming")
    expect(streaming).to_have_count(1, timeout=REPLY_TIMEOUT_S * 1000)  # a preview, growing
    partial_text = streaming.locator(".body").inner_text().strip()
    assert partial_text and len(partial_text) < len(SHOWN) and SHOWN.startswith(partial_text), partial_text
    expect(page.locator("#stop")).to_be_visible()
    expect(page.locator("#messages .msg.agent .body").last).to_have_text(SHOWN, timeout=REPLY_TIMEOUT_S * 1000)
    expect(page.locator("#messages .msg.streaming")).to_have_count(0)
    assert answers(page) == [SHOWN]  # one bubble: the preview became the answer
    assert page.locator("#messages strong").all_inner_texts() == ["quick"]
    assert page.locator("#messages script").count() == 0 and page.evaluate("window.pwned") is None
    expect(page.locator("#stop")).to_be_hidden()
    expect(page.locator("#typing")).to_be_hidden()  # answered: no longer typing
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "web-chat.png"))
    assert switchyard.stop() == 0


def test_a_second_person_sees_none_of_the_first_persons_conversations(
        switchyard: Switchyard, tmp_path: Path, model: FakeThread[ModelServer], chromium: Any) -> None:
    from playwright.sync_api import expect

    chat = configure(switchyard, tmp_path, model)
    switchyard.start()
    ada = open_chat(chromium, chat.printed_link())
    ada.fill("#text", "ada's private question")
    ada.keyboard.press("Enter")
    expect(ada.locator("#messages .msg.agent .body").last).to_have_text(SHOWN, timeout=REPLY_TIMEOUT_S * 1000)
    bob = open_chat(chromium, chat.link_for("bob"))
    expect(bob.locator("#who")).to_have_text("bob")
    assert bob.locator("#conversations a").evaluate_all("links => links.map(a => a.title)") == ["bob:1"]
    expect(bob.locator("#messages .msg")).to_have_count(0)
    bob.goto(f"{chat.url}#ada:1")  # asking for ada's conversation by name
    expect(bob.locator("#conversations a.current")).to_have_attribute("title", "bob:1")
    assert "ada's private question" not in bob.content()
    status = bob.evaluate("""async () => (await fetch('/ws?c=ada%3A1')).status""")
    assert status == 404
    assert switchyard.stop() == 0


class _EvilSite:
    """A page on another origin (another port of 127.0.0.1: the same site, so a SameSite cookie still goes along)
    that tries to post into the chat and to read it over the WebSocket."""

    def __init__(self, folder: Path, chat_url: str):
        folder.mkdir()
        chat = chat_url.rstrip("/")
        (folder / "index.html").write_text(f"""<!doctype html><body>
<form id="f" method="POST" action="{chat}/api/send" enctype="text/plain">
<input name='{{"conversation":"ada:1","text":"form post","id":"evil1","x":"' value='"}}'></form>
<script>
window.results = {{}};
fetch("{chat}/api/send", {{method: "POST", mode: "no-cors", credentials: "include",
  headers: {{"Content-Type": "text/plain"}},
  body: JSON.stringify({{conversation: "ada:1", text: "no-cors post", id: "evil2"}})}})
  .then(() => window.results.fetch = "sent", e => window.results.fetch = "failed");
fetch("{chat}/api/send", {{method: "POST", credentials: "include",
  headers: {{"Content-Type": "application/json", "X-Switchyard-Chat": "1"}},
  body: JSON.stringify({{conversation: "ada:1", text: "preflighted post", id: "evil3"}})}})
  .then(() => window.results.cors = "sent", e => window.results.cors = "failed");
const ws = new WebSocket("{chat.replace('http', 'ws')}/ws?c=ada%3A1");
ws.onmessage = (m) => {{ window.results.read = (window.results.read || "") + m.data; }};
ws.onclose = () => {{ window.results.ws = "closed"; }};
ws.onopen = () => {{ window.results.opened = true; }};
</script></body>""")
        handler = partial(SimpleHTTPRequestHandler, directory=str(folder))
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, name="evil-site", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_no_cookie_a_forged_one_and_another_sites_posts_and_websocket_are_refused(
        switchyard: Switchyard, tmp_path: Path, model: FakeThread[ModelServer], chromium: Any) -> None:
    chat = configure(switchyard, tmp_path, model)
    switchyard.start()
    stranger = chromium.new_context().new_page()
    assert stranger.goto(chat.url).status == 401  # no login link
    assert stranger.goto(f"{chat.url}?t=guessed-token").status == 401
    stranger.context.add_cookies([{"name": "switchyard_chat", "value": "forged", "url": chat.url}])
    assert stranger.goto(chat.url).status == 401
    assert stranger.goto(f"{chat.url}api/me").status == 401

    ada = open_chat(chromium, chat.printed_link())  # signed in: her cookie goes along to 127.0.0.1
    ada.fill("#text", "hello from the page")
    ada.keyboard.press("Enter")
    wait_until(lambda: any(e.get("text") == "hello from the page" for e in chat.log("ada:1")), 20)
    evil = _EvilSite(tmp_path / "evil", chat.url)
    try:
        ada.goto(evil.url)
        wait_until(lambda: {"fetch", "cors"} <= (keys := set(ada.evaluate("Object.keys(window.results || {})")))
                   and bool(keys & {"ws", "opened"}), 20)
        results = ada.evaluate("window.results")
        assert results["cors"] == "failed"  # the page's header needs a preflight the chat never grants
        assert results["ws"] == "closed" and "opened" not in results and "read" not in results
        with ada.expect_navigation():
            ada.evaluate("document.getElementById('f').submit()")
        assert "refused" in ada.content()
    finally:
        evil.close()
    texts = [e.get("text") for e in chat.log("ada:1") if e.get("from") == "user"]
    assert texts == ["hello from the page"]  # none of the other site's posts got in
    assert switchyard.stop() == 0
