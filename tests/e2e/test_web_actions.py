"""What a person does in the web chat besides typing, in headless Chromium against `switchyard run`, the agent
a live ACP session (the fake adapter, whose allowed tools really run): an approval tapped in the page runs the
tool once; the Stop button ends a streaming turn within 2 s; an uploaded file reaches the agent's prompt; a file
the agent sends is a download; a voice note recorded in the page (MediaRecorder, fed a synthetic tone) is
transcribed for the agent."""

from __future__ import annotations

import copy
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gateway.testing import wait_until
from tests.e2e.conftest import ORCHESTRATOR, Switchyard, live_agent_providers
from tests.e2e.test_channels import free_port
from tests.e2e.test_web_chat import CHROMIUM, LINK, chromium, open_chat

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180),
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                                                 "(apt-get install chromium)")]
__all__ = ["chromium"]
TOOL_RUNNING_AGENT = Path(__file__).parent / "providers" / "acp_agent.py"  # an allowed [run=CMD] really runs
WAIT_MS = 40_000
STOP_WITHIN_S = 2.0
SPOKEN = "what is left to do on the release"
WEBM = "\\x1aE\\xdf\\xa3"  # the EBML magic every WebM file starts with
# The transcriber: the words above for any WebM recording (what MediaRecorder makes), a failure otherwise.
TRANSCRIBER = [sys.executable, "-c", f"import sys; data = open(sys.argv[1], 'rb').read(); "
               f"print({SPOKEN!r}) if data[:4] == b'{WEBM}' and len(data) > 200 else sys.exit('not webm')", "{file}"]
REPORT = ("import os, pathlib; p = pathlib.Path(os.environ['SWITCHYARD_WORKSPACE']) / 'report.txt'; "
          "p.write_text('the quarterly numbers'); print(f'here it is [send_file: {p}]')")
PAINT = "import sys; print('painted it ' + sys.argv[1].strip())"
# A synthetic microphone: an oscillator, so MediaRecorder records real audio without a device.
FAKE_MICROPHONE = """
navigator.mediaDevices.getUserMedia = async () => {
  const context = new AudioContext();
  const tone = context.createOscillator();
  const out = context.createMediaStreamDestination();
  tone.connect(out);
  tone.start();
  return out.stream;
};
"""


def start(switchyard: Switchyard, agents: Path, **settings: Any) -> str:
    """Starts `switchyard run` with a web profile and the live fake agent; returns the printed login link."""
    orchestrator = copy.deepcopy(ORCHESTRATOR) | {"reply_within_sec": 120, "stream_after_sec": 0.2,
                                                  "stream_interval_sec": 0.3}
    orchestrator["workflows"]["report"] = {"description": "Send the report",
                                           "steps": [{"id": "Make", "command": [sys.executable, "-c", REPORT]}]}
    orchestrator["workflows"]["colour"] = {"description": "Ask a colour, then paint", "steps": [
        {"id": "Ask", "input": {"prompt": "Which colour, red or blue?"}},
        {"id": "Paint", "command": [sys.executable, "-c", PAINT, "{{steps.Ask.output}}"]}]}
    providers = live_agent_providers(agents)
    providers["fake_agent"]["acp_command"] = [sys.executable, str(TOOL_RUNNING_AGENT), "--like", "claude"]
    switchyard.configure({"channels": [{"id": "web", "type": "web", "port": free_port(), "user": "ada"}],
                          "providers": providers, **settings}, orchestrator)
    switchyard.start()
    return str(wait_until(lambda: LINK.findall(switchyard.output()), 20)[-1])


def say(page: Any, text: str) -> None:
    page.fill("#text", text)
    page.keyboard.press("Enter")


def agent_texts(page: Any) -> list[str]:
    return [t.strip() for t in page.locator("#messages .msg.agent .body").all_inner_texts()]


def test_an_approval_tapped_in_the_page_runs_the_tool_once(
        switchyard: Switchyard, agents: Path, chromium: Any, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    made = tmp_path / "made-by-the-tool"
    tool = f'sh -c "echo ran >> {made}"'  # each real run of the tool adds a line
    page = open_chat(chromium, start(switchyard, agents))
    say(page, f"please [run={tool}]")
    question = page.locator("#messages .msg.agent", has_text="asks to run")
    expect(question).to_contain_text("echo ran", timeout=WAIT_MS)
    assert not made.exists(), "the tool ran before anyone answered"
    question.get_by_role("button", name="Allow", exact=True).click()
    expect(question.locator(".answered")).to_have_text("answered: Allow")
    expect(question.locator(".buttons")).to_have_count(0)  # no second tap
    expect(page.locator("#messages .msg.agent", has_text=f"ran {tool}")).to_have_count(1, timeout=WAIT_MS)
    wait_until(lambda: not switchyard.unfinished(), 30)
    assert made.read_text() == "ran\n", "the allowed tool did not run, or ran more than once"
    assert sum(f"ran {tool}" in text for text in agent_texts(page)) == 1, agent_texts(page)
    assert switchyard.stop() == 0


def test_the_stop_button_ends_a_streaming_turn_within_two_seconds(
        switchyard: Switchyard, agents: Path, chromium: Any) -> None:
    from playwright.sync_api import expect

    page = open_chat(chromium, start(switchyard, agents))
    say(page, "tell me a long story [chunks=40][delay=0.3]")
    expect(page.locator("#messages .msg.streaming")).to_have_count(1, timeout=WAIT_MS)
    expect(page.locator("#stop")).to_be_visible()
    clicked = time.monotonic()
    page.click("#stop")
    expect(page.locator("#messages .msg.agent", has_text="Stopped.")).to_have_count(1, timeout=STOP_WITHIN_S * 1000)
    assert time.monotonic() - clicked < STOP_WITHIN_S
    assert not any("long story (0 earlier)" in text for text in agent_texts(page)), "the whole answer came"
    assert switchyard.stop() == 0


def test_an_uploaded_file_reaches_the_prompt_and_a_file_the_agent_sends_is_a_download(
        switchyard: Switchyard, agents: Path, chromium: Any, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    page = open_chat(chromium, start(switchyard, agents))
    notes = tmp_path / "notes.txt"
    notes.write_text("the meeting notes")
    page.fill("#text", "summarise this")
    page.set_input_files("#file", str(notes))
    expect(page.locator("#messages .msg.user a.file")).to_contain_text("notes.txt")
    answer = page.locator("#messages .msg.agent", has_text="summarise this")
    expect(answer).to_contain_text("notes.txt", timeout=WAIT_MS)  # the agent's prompt named the saved file
    saved = [p for p in (switchyard.home.files / "web").rglob("*notes.txt")]
    assert len(saved) == 1 and saved[0].read_text() == "the meeting notes"
    assert str(saved[0]) in answer.inner_text()

    say(page, "start report")
    link = page.locator("#messages .msg.agent a.file", has_text="report.txt")
    expect(link).to_have_count(1, timeout=WAIT_MS)
    with page.expect_download() as download:
        link.click()
    assert Path(download.value.path()).read_text() == "the quarterly numbers"
    assert download.value.suggested_filename == "report.txt"
    assert switchyard.stop() == 0


def test_a_voice_note_recorded_in_the_page_is_transcribed_for_the_agent(
        switchyard: Switchyard, agents: Path, chromium: Any) -> None:
    from playwright.sync_api import expect

    link = start(switchyard, agents, transcribe={"command": TRANSCRIBER, "timeout_sec": 30})
    context = chromium.new_context()
    context.add_init_script(FAKE_MICROPHONE)
    page = context.new_page()
    page.goto(link)
    expect(page.locator("#who")).to_have_text("ada")
    page.click("#record")
    expect(page.locator("#record")).to_have_text("Stop recording")
    page.wait_for_timeout(1500)  # a second and a half of tone: the length of the note itself
    page.click("#record")
    expect(page.locator("#messages .msg.user a.file")).to_contain_text("voice note: voice.webm")
    expect(page.locator("#messages .msg.agent", has_text=SPOKEN)).to_have_count(1, timeout=WAIT_MS)
    assert [e["channel"] for e in switchyard.events("voice.transcribed")] == ["web"]
    assert switchyard.stop() == 0


def test_an_input_steps_question_shows_in_the_page_and_the_answer_typed_there_continues_the_run(
        switchyard: Switchyard, agents: Path, chromium: Any) -> None:
    from playwright.sync_api import expect

    page = open_chat(chromium, start(switchyard, agents))
    say(page, "start colour")
    question = page.locator("#messages .msg.agent", has_text="Which colour, red or blue?")
    expect(question).to_have_count(1, timeout=WAIT_MS)
    expect(question).to_contain_text("waits for your answer")
    [run] = [e["job_id"] for e in switchyard.events("job.waiting_input")]
    say(page, "blue")
    expect(page.locator("#messages .msg.agent", has_text="painted it blue")).to_have_count(1, timeout=WAIT_MS)
    wait_until(lambda: run in [e["job_id"] for e in switchyard.events("job.succeeded")], 30)
    assert switchyard.stop() == 0
