"""Voice notes and audio files turned into text by the `transcribe:` command, before the selector sees them.

Each `audio` entry of a message (gateway/channelkit/audio.py) is given to the command; its printed text goes into
the message as `[voice 0:12] <text>` just before the file's `[file: …]` tag, which stays. The length is
the platform's when it reports one, else ffprobe's reading of the file (when ffprobe is installed),
else the label is just `[voice]`. The payload stored in the queue is never changed: a retried message
is transcribed again.

A note is transcribed only from a file of its own conversation's attachment folder
(gateway.channelkit.attachments.in_own_folder, the rule replies' files follow too): every note of a message is
checked before any command runs, and each again, resolved, just before its command starts, which is
given the resolved path (a file swapped for a link meanwhile is refused, not followed).

Without `transcribe:` the message is refused at once (a dead letter; the sender is told how it is fixed);
a failing command is retried like any handler failure, and the last attempt's apology says its error.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from gateway.api import PermanentError
from gateway.channelkit.attachments import in_own_folder
from gateway.channelkit.audio import AUDIO_KEY, AudioNote, audio_notes, clock
from gateway.home import Home
from gateway.models import IncomingPayload
from gateway.settings import Settings, TranscribeSettings
from gateway.telemetry.events import EventLog
from orchestrator.agents.clis.runner import ProviderRefused
from orchestrator.agents.providers import ProviderRunner
from orchestrator.agents.spawn import ProviderFailed, describe_failure, run_process

NO_TRANSCRIBER = ("I cannot read voice notes yet: voice notes need `transcribe:` in settings (a command that turns "
                  "an audio file into text). Your message is kept for the operator; please type it meanwhile.")
FAILED = "I could not transcribe your voice note: {reason}"
NOT_OWN = "its file is not one of this conversation's own files"
NO_SPEECH = "(no speech recognised)"
PROBE_TIMEOUT_SEC = 10.0
NAME = "transcribe"


class TranscriptionFailed(ProviderFailed):
    """The transcriber failed in a way a later attempt may not repeat (retried); `reply` is what the
    sender is told when the attempts run out."""

    def __init__(self, failure: ProviderFailed):
        super().__init__(failure.name, failure.result)
        self.reply = FAILED.format(reason=describe_failure(failure.name, failure.result))


class Transcriber:
    """Puts the text of a message's voice notes and audio files into the message (see the module)."""

    def __init__(self, home: Home, settings: Settings, runner: ProviderRunner, events: EventLog | None = None):
        self._home = home
        self._settings: TranscribeSettings | None = settings.transcribe
        self._runner = runner
        self._events = events

    def reconfigure(self, settings: Settings) -> None:
        """Runs the `transcribe:` command of settings.yaml reloaded while running."""
        self._settings = settings.transcribe

    async def transcribed(self, message: IncomingPayload, *, turn: str | None = None) -> IncomingPayload:
        """The message with each voice note's text in it (the message itself when it has none); raises
        PermanentError (no transcriber, the file gone, the command missing) or TranscriptionFailed.
        `turn`: the conversation whose `/stop` stops the command."""
        notes = audio_notes(message)
        if not notes:
            return message
        if self._settings is None:
            raise PermanentError("a voice note arrived and settings.yaml has no `transcribe:`", reply=NO_TRANSCRIBER)
        for note in notes:  # all of them before any command runs
            self._own_file(note, message)
        text, entries = message.message, []
        for note in notes:
            path = self._own_file(note, message)  # again as its command starts: a file swapped meanwhile
            spoken = await self._text_of(self._settings, path, turn)
            seconds = note.seconds if note.seconds is not None else await probed_seconds(
                path, self._runner.environment())
            label = f"[voice {clock(seconds)}]" if seconds is not None else "[voice]"
            text = with_line(text, f"{label} {spoken or NO_SPEECH}", note.path)
            entries.append({**note.as_json(), "seconds": seconds, "text": spoken})
            if self._events is not None:
                self._events.emit("voice.transcribed", channel=message.channel, conversation=message.conversation,
                                  seconds=seconds, chars=len(spoken))
        return message.model_copy(update={"message": text, AUDIO_KEY: entries})

    def _own_file(self, note: AudioNote, message: IncomingPayload) -> str:
        """The resolved path of a note's file, when it is in the message's own conversation's attachment folder."""
        real = os.path.realpath(note.path)
        if not in_own_folder(self._home, real, message.profile, message.conversation):
            raise PermanentError(f"voice note {note.path} is not one of its conversation's own files "
                                 f"({message.profile}/{message.conversation})", reply=FAILED.format(reason=NOT_OWN))
        if not os.path.isfile(real):
            raise PermanentError(f"voice note {note.path} is missing",
                                 reply=FAILED.format(reason="its file is gone"))
        return real

    async def _text_of(self, settings: TranscribeSettings, path: str, turn: str | None) -> str:
        """What the command prints for one file, on one line."""
        try:
            result = await self._runner.run_command(
                NAME, settings.argv(path), stdin=None, cwd=self._home.root, timeout_sec=settings.timeout_sec,
                max_output=settings.max_output_bytes, env=settings.env, turn=turn)
        except ProviderRefused as exc:
            raise PermanentError(str(exc), reply=FAILED.format(reason=exc.reason)) from None
        except ProviderFailed as exc:
            raise TranscriptionFailed(exc) from None
        return " ".join(result.stdout.split())


def with_line(text: str, line: str, path: str) -> str:
    """`text` with `line` put just before the line holding `[file: path]` (at the end when none does)."""
    lines = text.split("\n") if text else []
    tag = re.compile(r"\[file:\s*" + re.escape(path) + r"\s*\]")
    for index, existing in enumerate(lines):
        if tag.search(existing):
            return "\n".join([*lines[:index], line, *lines[index:]])
    return "\n".join([*lines, line])


async def probed_seconds(path: str, env: dict[str, str]) -> float | None:
    """The length of an audio file as ffprobe reads it (run with `env`: no secrets); None without ffprobe
    or when it cannot tell."""
    program = shutil.which("ffprobe")
    if program is None:
        return None
    result = await run_process(
        [program, "-v", "error", "-show_entries", "format=duration", "-of", "default=nw=1:nk=1", path],
        stdin=None, env=env, cwd=Path(path).parent, timeout_sec=PROBE_TIMEOUT_SEC, max_output=4096)
    try:
        return float(result.stdout.strip()) if result.exit_code == 0 else None
    except ValueError:
        return None


def transcribe_problems(settings: Settings, source: str) -> list[str]:
    """`switchyard check`'s line when the `transcribe:` command's program is not on PATH."""
    if settings.transcribe is None:
        return []
    program = settings.transcribe.command[0]
    if shutil.which(program) is None:
        return [f"{source}: transcribe.command: `{program}` not found on PATH (voice notes would be refused)"]
    return []
