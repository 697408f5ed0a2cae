"""orchestrator/agents/transcribe.py: voice notes reach the agent as text, or their sender is told why not."""

from __future__ import annotations

import asyncio
import os
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.api import HandlerContext, PermanentError
from gateway.channelkit.attachments import attachment_folder
from gateway.channelkit.audio import audio_note
from gateway.home import Home
from gateway.models import IncomingPayload
from gateway.runtime.outcome import Dead, Retry, failed
from gateway.settings import ChannelProfile, QueueSettings, Settings, SettingsError, TranscribeSettings, load_settings
from gateway.telemetry.events import EventLog, read_events
from gateway.testing import async_wait_until
from orchestrator import Orchestrator
from orchestrator.agents.transcribe import NO_TRANSCRIBER, TranscriptionFailed, transcribe_problems, with_line
from orchestrator.chat.handler import STOPPED_TURN
from tests.fakes.audio import fake_transcriber, seconds_of, spoken_ogg
from tests.fakes.orchestrator import FakeOutbox, make_message

SPOKEN = "turn on the kitchen lights"
ECHO_CONFIG = """
selector: {provider: rules}
diagnostics: {provider: rules}
reply_within_sec: 60
rules: {default_workflow: chat}
agents:
  helper: {provider: echo, prompt: "the agent read: {{message}}"}
workflows:
  chat:
    description: Talk with the helper agent
    steps:
      - {id: Reply, agent: helper}
"""


@pytest.fixture
def voice(home: Home, tmp_path: Path) -> tuple[Path, bytes]:
    """A real OGG/Opus voice note saved where the console channel saves conversation c1's attachments."""
    data = spoken_ogg(SPOKEN, tmp_path)
    folder = attachment_folder(home, "console", "c1")
    folder.mkdir(parents=True)
    path = folder / "1-voice.oga"
    path.write_bytes(data)
    return path, data


@pytest.fixture
def build(home: Home, events: EventLog, outbox: FakeOutbox, write_config: Callable[[str], Path],
          start: Callable[..., Any]) -> Callable[..., Any]:
    """Starts an orchestrator whose agent echoes what it read, with these settings."""

    async def make(**settings: Any) -> Orchestrator:
        write_config(ECHO_CONFIG)
        context = HandlerContext(home=home, settings=Settings(queue=QueueSettings(fsync=False), **settings),
                                 events=events, outbox=outbox, queue_stats=lambda: {})
        orchestrator: Orchestrator = await start(context)
        return orchestrator

    return make


def voice_message(path: Path, seconds: float | None, caption: str = "", **fields: Any) -> IncomingPayload:
    text = "\n".join(line for line in (caption, f"[file: {path}]") if line)
    return make_message(text, files=[str(path)], audio=[audio_note(path, seconds, "audio/ogg")], **fields)


async def test_a_voice_note_reaches_the_agent_as_text_with_its_length_and_its_file(
    build: Callable[..., Any], voice: tuple[Path, bytes], tmp_path: Path, home: Home
) -> None:
    path, data = voice
    orchestrator = await build(transcribe=TranscribeSettings(command=fake_transcriber(tmp_path, {data: SPOKEN})))
    [answer] = await orchestrator.handle(voice_message(path, 12, caption="from the car"))
    assert answer.message == f"the agent read: from the car\n[voice 0:12] {SPOKEN}\n[file: {path}]"
    assert [e["seconds"] for e in read_events(home.events_file) if e["event"] == "voice.transcribed"] == [12]


async def test_without_the_platforms_length_it_is_read_from_the_file(
    build: Callable[..., Any], voice: tuple[Path, bytes], tmp_path: Path
) -> None:
    path, data = voice
    orchestrator = await build(transcribe=TranscribeSettings(command=fake_transcriber(tmp_path, {data: SPOKEN})))
    [answer] = await orchestrator.handle(voice_message(path, None))
    seconds = round(seconds_of(data, tmp_path))
    assert seconds >= 1
    assert answer.message == f"the agent read: [voice 0:{seconds:02d}] {SPOKEN}\n[file: {path}]"


async def test_without_transcribe_the_sender_is_told_how_it_is_fixed_and_no_agent_runs(
    build: Callable[..., Any], voice: tuple[Path, bytes], outbox: FakeOutbox, home: Home
) -> None:
    orchestrator = await build()
    message = voice_message(voice[0], 3)
    with pytest.raises(PermanentError) as raised:
        await orchestrator.handle(message)
    outcome = failed(message, raised.value, 0, QueueSettings())
    assert isinstance(outcome, Dead) and outcome.apology.message == NO_TRANSCRIBER
    assert "voice notes need `transcribe:` in settings" in NO_TRANSCRIBER
    assert outbox.payloads == [] and not list(home.runs.glob("*/state.json"))


async def test_a_failing_transcriber_is_retried_then_its_error_reaches_the_sender(
    build: Callable[..., Any], voice: tuple[Path, bytes], tmp_path: Path
) -> None:
    path, data = voice
    command = [*fake_transcriber(tmp_path, {data: SPOKEN}), "--fail"]
    orchestrator = await build(transcribe=TranscribeSettings(command=command))
    message = voice_message(path, 3)
    with pytest.raises(TranscriptionFailed) as raised:
        await orchestrator.handle(message)
    settings = QueueSettings(max_attempts=3)
    assert isinstance(failed(message, raised.value, 0, settings), Retry)
    last = failed(message, raised.value, 2, settings)
    assert isinstance(last, Dead)
    assert last.apology.message.startswith("I could not transcribe your voice note: transcribe exited with code 2")
    assert "failed to load model 'ggml-base.en.bin'" in last.apology.message


async def test_a_missing_transcriber_program_is_refused_at_once_naming_it(
    build: Callable[..., Any], voice: tuple[Path, bytes]
) -> None:
    orchestrator = await build(transcribe=TranscribeSettings(command=["/nonexistent/whisper-cli", "-f"]))
    with pytest.raises(PermanentError) as raised:
        await orchestrator.handle(voice_message(voice[0], 3))
    assert "`/nonexistent/whisper-cli` was not found" in str(raised.value.reply)


async def test_the_transcriber_never_sees_a_secret_variable(
    build: Callable[..., Any], voice: tuple[Path, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, data = voice
    monkeypatch.setenv("VOICE_TEST_BOT_TOKEN", "123:secret")
    seen = tmp_path / "env.txt"
    monkeypatch.setenv("FAKE_TRANSCRIBER_ENV", str(seen))
    channel = ChannelProfile.model_validate({"id": "tg", "type": "telegram", "token_env": "VOICE_TEST_BOT_TOKEN"})
    orchestrator = await build(transcribe=TranscribeSettings(command=fake_transcriber(tmp_path, {data: SPOKEN})),
                               channels=[channel])
    await orchestrator.handle(voice_message(path, 3))
    names = seen.read_text().split()
    assert "FAKE_TRANSCRIBER_ENV" in names and "VOICE_TEST_BOT_TOKEN" not in names


async def test_a_file_outside_the_attachment_folders_is_not_transcribed(
    build: Callable[..., Any], tmp_path: Path, voice: tuple[Path, bytes]
) -> None:
    outside = tmp_path / "elsewhere.ogg"
    outside.write_bytes(voice[1])
    orchestrator = await build(transcribe=TranscribeSettings(command=fake_transcriber(tmp_path, {voice[1]: SPOKEN})))
    with pytest.raises(PermanentError, match="not one of its conversation's own files"):
        await orchestrator.handle(voice_message(outside, 3))


VICTIMS_WORDS = "the door code is four four seven one"


@pytest.fixture
def victims_note(home: Home, tmp_path: Path) -> tuple[Path, bytes]:
    """A voice note of conversation `victim`, saved where its channel saves that conversation's attachments."""
    data = spoken_ogg(VICTIMS_WORDS, tmp_path)
    folder = attachment_folder(home, "console", "victim")
    folder.mkdir(parents=True)
    path = folder / "1-voice.oga"
    path.write_bytes(data)
    return path, data


async def outcome_of(orchestrator: Orchestrator, message: IncomingPayload) -> list[str]:
    """What the sender is shown for `message`: the texts of its answers, or the apology of its dead letter."""
    try:
        return [answer.message for answer in await orchestrator.handle(message)]
    except PermanentError as exc:
        dead = failed(message, exc, 0, QueueSettings())
        assert isinstance(dead, Dead)
        return [dead.apology.message]


def swapping(folder: Path, note: Path, target: Path, transcriber: list[str]) -> list[str]:
    """A `transcribe:` command that, the first time it runs, replaces `note` by a link to `target`, then runs
    `transcriber` on the file it was given (as another process of the machine might, between two checks)."""
    script = folder / "swapping_transcriber.py"
    script.write_text(textwrap.dedent(f"""
        import os, sys
        if not os.path.islink({str(note)!r}):
            os.unlink({str(note)!r})
            os.symlink({str(target)!r}, {str(note)!r})
        argv = {transcriber[:-1]!r} + [sys.argv[-1]]
        os.execv(argv[0], argv)
    """))
    return [sys.executable, str(script), "{file}"]


REFUSED = ["I could not transcribe your voice note: its file is not one of this conversation's own files"]


async def test_another_conversations_voice_note_is_refused_and_never_transcribed(
    build: Callable[..., Any], victims_note: tuple[Path, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 32 §2: a payload of conversation `attacker` naming the victim's voice note under files/."""
    path, data = victims_note
    ran = tmp_path / "transcriber-ran.txt"
    monkeypatch.setenv("FAKE_TRANSCRIBER_ENV", str(ran))
    orchestrator = await build(transcribe=TranscribeSettings(command=fake_transcriber(tmp_path,
                                                                                      {data: VICTIMS_WORDS})))
    shown = await outcome_of(orchestrator, voice_message(path, 3, conversationId="attacker"))
    assert not any(VICTIMS_WORDS in text for text in shown), f"the victim's words reached the attacker: {shown}"
    assert shown == REFUSED
    assert not ran.exists(), "the transcriber ran on another conversation's file"


async def test_a_link_in_the_senders_own_folder_to_another_conversations_note_is_refused(
    build: Callable[..., Any], victims_note: tuple[Path, bytes], home: Home, tmp_path: Path
) -> None:
    path, data = victims_note
    own = attachment_folder(home, "console", "attacker")
    own.mkdir(parents=True)
    (own / "2-voice.oga").symlink_to(path)
    orchestrator = await build(transcribe=TranscribeSettings(command=fake_transcriber(tmp_path,
                                                                                      {data: VICTIMS_WORDS})))
    shown = await outcome_of(orchestrator, voice_message(own / "2-voice.oga", 3, conversationId="attacker"))
    assert shown == REFUSED


async def test_a_note_swapped_for_a_link_after_the_first_check_is_refused_when_its_transcriber_starts(
    build: Callable[..., Any], victims_note: tuple[Path, bytes], voice: tuple[Path, bytes], tmp_path: Path
) -> None:
    """Two notes of c1's own: while the first is transcribed, the second is replaced by a link to the
    victim's note (after the check every note gets before any command runs)."""
    victim, victims_data = victims_note
    first, data = voice
    second = first.with_name("2-voice.oga")
    second.write_bytes(data)
    transcriber = fake_transcriber(tmp_path, {data: SPOKEN, victims_data: VICTIMS_WORDS})
    command = swapping(tmp_path, second, victim, transcriber)
    orchestrator = await build(transcribe=TranscribeSettings(command=command))
    message = make_message(f"[file: {first}]\n[file: {second}]", files=[str(first), str(second)],
                           audio=[audio_note(first, 3, "audio/ogg"), audio_note(second, 3, "audio/ogg")])
    shown = await outcome_of(orchestrator, message)
    assert os.path.islink(second), "the transcriber of the first note swapped the second"
    assert not any(VICTIMS_WORDS in text for text in shown), f"the victim's words reached c1: {shown}"
    assert shown == REFUSED


def test_the_voice_line_goes_before_its_files_tag() -> None:
    assert with_line("hi\n[file: /a.ogg]\n[file: /b.ogg]", "[voice 0:01] x", "/b.ogg") == \
        "hi\n[file: /a.ogg]\n[voice 0:01] x\n[file: /b.ogg]"
    assert with_line("", "[voice] x", "/a.ogg") == "[voice] x"


def test_transcribe_settings_take_an_argv_with_or_without_a_file_placeholder(tmp_path: Path) -> None:
    settings = tmp_path / "settings.yaml"
    settings.write_text("transcribe: [whisper-cli, -m, base.bin, -f, '{file}', -nt]\n")
    assert load_settings(settings).transcribe.argv("/a.ogg") == [  # type: ignore[union-attr]
        "whisper-cli", "-m", "base.bin", "-f", "/a.ogg", "-nt"]
    settings.write_text("transcribe: {command: [my-stt], timeout_sec: 30}\n")
    loaded = load_settings(settings).transcribe
    assert loaded is not None and loaded.argv("/a.ogg") == ["my-stt", "/a.ogg"] and loaded.timeout_sec == 30


@pytest.mark.parametrize("value", ["[]", "whisper-cli", "{command: [whisper-cli], timeout: 3}"])
def test_a_bad_transcribe_setting_names_the_key(tmp_path: Path, value: str) -> None:
    settings = tmp_path / "settings.yaml"
    settings.write_text(f"transcribe: {value}\n")
    with pytest.raises(SettingsError, match=re.escape("transcribe")):
        load_settings(settings)


def test_check_reports_a_transcriber_that_is_not_installed() -> None:
    settings = Settings(transcribe=TranscribeSettings(command=["no-such-whisper-9", "-f"]))
    assert transcribe_problems(settings, "settings.yaml") == [
        "settings.yaml: transcribe.command: `no-such-whisper-9` not found on PATH (voice notes would be refused)"]
    assert transcribe_problems(Settings(transcribe=TranscribeSettings(command=[os.path.realpath("/bin/sh")])),
                               "s") == []


async def test_stop_ends_a_slow_transcription_at_once_and_nothing_is_retried(
    build: Callable[..., Any], voice: tuple[Path, bytes], tmp_path: Path
) -> None:
    path, data = voice
    pid_file = tmp_path / "transcriber.pid"
    orchestrator = await build(transcribe=TranscribeSettings(
        command=[*fake_transcriber(tmp_path, {data: SPOKEN}), "--sleep", str(pid_file)]))
    handling = asyncio.create_task(orchestrator.handle(voice_message(path, 3)))
    try:
        await async_wait_until(lambda: pid_file.exists() and pid_file.read_text(), 20)
        [stopped] = await orchestrator.handle(make_message("/stop"))
        assert stopped.message == STOPPED_TURN
        assert await asyncio.wait_for(handling, 10) == []  # done: no reply of its own, no failure to retry
    finally:
        handling.cancel()  # (a failed assertion must not leave the slow transcriber running)
        await asyncio.gather(handling, return_exceptions=True)
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)
