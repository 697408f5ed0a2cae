"""The dashboard at a glance, read in headless Chromium (Debian's `chromium`, driven by Playwright): a burst of
100 messages is the peak of the "messages in" plot in the minute it happened, an event is a readable line whose
JSON is one click away, and a run's row opens onto its steps; on both queue backends. Its screenshot is kept in
tests/artifacts/; SWITCHYARD_UPDATE_SCREENSHOT=1 writes the docs' picture (docs/img/dashboard.png) too."""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from gateway.testing import wait_until
from tests.e2e.conftest import Switchyard, both_backends
from tests.e2e.dashboard import BEAT, start_with_dashboard

CHROMIUM = Path("/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "artifacts"
BURST = 100

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180), both_backends,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                                                 "(apt-get install chromium)")]


@pytest.fixture
def browser_page() -> Iterator[object]:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=15_000)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM))
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        yield page
        browser.close()


def minute_of(ts: str) -> str:
    """An event's minute as the plots label it (`YYYY-MM-DDTHH:MMZ`)."""
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).strftime("%Y-%m-%dT%H:%MZ")


def test_a_burst_of_messages_is_the_peak_of_its_minute_and_events_read_as_lines(
        switchyard: Switchyard, browser_page: object) -> None:
    from playwright.sync_api import Page, expect

    page: Page = browser_page  # type: ignore[assignment]
    url = start_with_dashboard(switchyard, channels=[{**BEAT, "interval_sec": 3}])
    started = switchyard.send("start build", conversationId="builder")
    switchyard.reply_to(started["messageId"], timeout=30)
    for _ in range(BURST):  # answered by the built-in rules: no provider runs
        switchyard.send("/help", conversationId="burst")
    wait_until(lambda: len([e for e in switchyard.events("job.succeeded") if e.get("conversation") == "burst"])
               == BURST, 60)

    claims = [e for e in switchyard.events("message.claimed") if e.get("attempt") in (None, 1)]
    per_minute = Counter(minute_of(e["ts"]) for e in claims)
    burst_minutes = Counter(minute_of(e["ts"]) for e in claims if e.get("conversation") == "burst")
    peak_minute, peak = per_minute.most_common(1)[0]
    assert burst_minutes[peak_minute] >= BURST / 2  # the burst made the peak (however a minute's end cut it)

    page.goto(url)
    bars = page.locator("#plot-messages g.in rect")
    expect(bars.first).to_be_attached()
    peak_bar = page.locator(f'#plot-messages g.in rect[data-minute="{peak_minute}"]')
    expect(peak_bar).to_be_attached()
    shown_peak = int(peak_bar.get_attribute("data-value") or 0)  # a heartbeat (every 3 s) may have come since
    assert peak <= shown_peak <= peak + 25
    shown = {bar.get_attribute("data-minute"): int(bar.get_attribute("data-value") or 0) for bar in bars.all()}
    assert max(shown, key=lambda minute: shown[minute]) == peak_minute
    assert all(value < peak for minute, value in shown.items() if minute != peak_minute)
    heights = {bar.get_attribute("data-minute"): float(bar.get_attribute("height") or 0) for bar in bars.all()}
    assert heights[peak_minute] == max(heights.values())  # drawn as the tallest bar, not only labelled so
    expect(page.locator("#plot-messages g.out rect").first).to_be_attached()  # the heartbeat's replies
    expect(page.locator("#plot-latency polyline.p99")).to_have_attribute("data-values", re.compile(r"\d"))
    box = page.locator(f'#plot-messages g.in rect[data-minute="{peak_minute}"]').bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)  # the value under the pointer
    expect(page.locator("#plot-messages .reading")).to_have_text(f" {peak_minute} in {shown_peak}")
    plots = page.request.get(f"{url}api/glance")  # what the script fetches every 30 s
    assert plots.ok
    # the heartbeat beats every 3 s: by now its minute may have counted a message or two more than the page showed
    fetched = re.search(rf'data-minute="{peak_minute}" data-value="(\d+)"', plots.text())
    assert fetched is not None and shown_peak <= int(fetched.group(1)) <= peak + 25

    key = page.locator("#events tbody tr details.json").first.get_attribute("data-key")
    line = page.locator("#events tbody tr", has=page.locator(f'details[data-key="{key}"]'))
    text = line.inner_text()
    assert "{" not in text and '"event"' not in text and "job_id" not in text  # words, not JSON
    line.locator("summary").click()
    expect(line.locator("pre")).to_be_visible()
    assert '"event":' in line.locator("pre").inner_text()
    expect(page.locator("#updated")).to_contain_text("updated")  # the script refreshes the sections
    with page.expect_response(lambda response: response.url.endswith("/api/sections")):
        pass  # a refresh leaves the opened JSON open
    expect(page.locator("#events details.json[open]")).to_have_count(1)

    run = page.locator("#runs tbody tr", has_text="build").locator("details.run")
    expect(run.locator("li").first).not_to_be_visible()
    run.locator("summary").click()
    expect(run.locator("li")).to_have_count(3)
    expect(run).to_contain_text("completed")

    page.locator("#events details.json[open] summary").click()  # closed again for the picture
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / f"dashboard-glance-{switchyard.backend}.png"
    page.screenshot(path=str(shot), full_page=True)
    if os.environ.get("SWITCHYARD_UPDATE_SCREENSHOT") == "1" and switchyard.backend == "files":  # its first screen
        (ROOT / "docs" / "img").mkdir(exist_ok=True)
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(ROOT / "docs" / "img" / "dashboard.png"))
    print(f"dashboard screenshot: {shot}")
