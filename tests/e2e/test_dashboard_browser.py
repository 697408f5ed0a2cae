"""The dashboard page in headless Chromium (Debian's `chromium`, driven by Playwright): it renders the
state, hostile names stay text, and its retry button brings a dead letter back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.testing import wait_until
from tests.e2e.conftest import Switchyard
from tests.e2e.dashboard import HOSTILE, make_dead_letter, start_with_dashboard

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                                                 "(apt-get install chromium)")]


@pytest.fixture
def browser_page() -> Iterator[object]:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=15_000)  # each expect waits this long for its state (a busy machine)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM))
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        yield page
        browser.close()


def test_the_page_renders_the_state_and_its_retry_button_brings_a_dead_letter_back(
        switchyard: Switchyard, browser_page: object) -> None:
    from playwright.sync_api import Page, expect

    page: Page = browser_page  # type: ignore[assignment]
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    url = start_with_dashboard(switchyard)
    started = switchyard.send("start build")
    switchyard.reply_to(started["messageId"])
    sent = make_dead_letter(switchyard)
    wait_until(lambda: len(switchyard.events("heartbeat.ok")) >= 3, 20)

    page.goto(url)
    dead = page.locator("#dead-letters")
    expect(dead.locator("tbody tr")).to_have_count(1)
    expect(dead).to_contain_text(HOSTILE)  # shown as the text it is
    expect(page.locator("#runs")).to_contain_text("build")
    expect(page.locator("#runs .step.completed")).to_have_count(3)
    expect(page.locator("#channels")).to_contain_text("running")
    expect(page.locator("#beats svg polyline")).to_have_count(1)
    expect(page.locator("#updated")).to_contain_text("updated")  # the script refreshed it in place
    assert page.locator("img").count() == 0 and page.evaluate("window.pwned") is None and dialogs == []
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "dashboard.png"
    page.screenshot(path=str(shot), full_page=True)
    print(f"dashboard screenshot: {shot}")

    # A click the way a person makes it, its button held while the sections refresh twice: the refresh
    # must not replace the button between the press and the release (the click would be lost).
    dead.locator("button.retry").hover()
    page.mouse.down()
    for _ in range(2):
        with page.expect_response(lambda response: response.url.endswith("/api/sections")):
            pass
    page.mouse.up()
    expect(dead).to_contain_text("no dead letters", timeout=20_000)
    wait_until(lambda: any(e.get("conversation") == HOSTILE for e in switchyard.events("job.succeeded")), 20)
    wait_until(lambda: any("answered" in reply["message"] for reply in switchyard.replies(sent["messageId"])), 20)
    expect(page.locator("#notice")).to_contain_text("retried")


def test_an_answer_given_on_the_page_shows_in_its_audit_table_as_text(
        switchyard: Switchyard, browser_page: object) -> None:
    """Denying a tool approval on the page (no turn waits for it: its owner is another process) is an audit record,
    listed newest first with who, where, what and when; the tool call's hostile title stays text."""
    import time

    from playwright.sync_api import Page, expect

    from gateway.approvals import Approval, FileApprovals
    from gateway.scope import ConversationScope

    page: Page = browser_page  # type: ignore[assignment]
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    url = start_with_dashboard(switchyard)
    assert switchyard.cli("usage", "reset", "--by", "sender", "--all").returncode == 0  # an older record
    now = time.time()
    FileApprovals(switchyard.home).request(Approval(
        id="brow01", scope=ConversationScope("console", "console", "desk").key, title=HOSTILE,
        options=[{"id": "ok", "name": "Allow once", "kind": "allow_once"},
                 {"id": "no", "name": "Reject", "kind": "reject_once"}],
        address={"channel": "console", "conversationId": "desk", "messageId": "m1"}, owner="elsewhere:1:1",
        created_at=now, expires_at=now + 600))

    page.goto(url)
    audit = page.locator("#audit")
    expect(audit.locator("tbody tr")).to_have_count(1)
    expect(audit).to_contain_text("usage.reset")
    page.locator('#approvals button.approval[data-verdict="deny"]').click()
    expect(audit.locator("tbody tr")).to_have_count(2, timeout=20_000)
    newest = audit.locator("tbody tr").first
    expect(newest).to_contain_text("approval.answer")
    expect(newest).to_contain_text("operator")
    expect(newest).to_contain_text("dashboard")
    expect(newest).to_contain_text(f"denied {HOSTILE}")  # shown as the text it is
    assert page.locator("img").count() == 0 and page.evaluate("window.pwned") is None and dialogs == []
