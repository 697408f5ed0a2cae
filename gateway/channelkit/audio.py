"""Voice notes and audio files on an incoming payload: how a channel marks them, how they are read back.

A channel that downloads a voice note or an audio file lists it under the payload's extra key `audio`,
one `{"path", "seconds", "mime"}` object per file (the file stays in `files` and its `[file: …]` tag in
the text). `seconds` is the platform's own duration when it reports one, else null. The orchestrator
turns each into text before the selector sees the message (orchestrator/agents/transcribe.py).
"""

from __future__ import annotations

import mimetypes
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.models import IncomingPayload

AUDIO_KEY = "audio"


@dataclass(frozen=True)
class AudioNote:
    """One voice note or audio file a message brought: its saved path, length (when known) and type."""

    path: str
    seconds: float | None = None
    mime: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The object a channel puts in the payload's `audio` list."""
        return {"path": self.path, "seconds": self.seconds, "mime": self.mime}


def audio_note(path: str | Path, seconds: float | None = None, mime: str | None = None) -> dict[str, Any]:
    """The `audio` entry of a saved voice note or audio file (what channels put on the payload)."""
    length = float(seconds) if seconds is not None and seconds >= 0 else None
    return AudioNote(str(path), length, mime.split(";")[0].strip() if mime else None).as_json()


def with_audio(message: IncomingPayload, notes: list[dict[str, Any]]) -> IncomingPayload:
    """The payload with these `audio_note` entries as its `audio` list (the payload itself when none)."""
    return message.model_copy(update={AUDIO_KEY: notes}) if notes else message


def is_audio(mime: str | None, filename: str = "") -> bool:
    """Whether a file is audio: by its MIME type when the platform gives one, else by its name."""
    guessed = (mime or mimetypes.guess_type(filename)[0] or "").lower()
    return guessed.startswith("audio/") or guessed == "application/ogg"


def audio_notes(message: IncomingPayload) -> list[AudioNote]:
    """The voice notes and audio files a message carries (its `audio` list; malformed entries skipped)."""
    found = []
    for entry in (message.model_extra or {}).get(AUDIO_KEY) or ():
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str) or not entry["path"]:
            continue
        seconds = entry.get("seconds")
        mime = entry.get("mime")
        found.append(AudioNote(entry["path"], float(seconds) if isinstance(seconds, int | float) else None,
                               mime if isinstance(mime, str) else None))
    return found


def clock(seconds: float | None) -> str:
    """A duration as a voice-note label shows it: `0:12`, `12:05`, `1:02:03` (empty when unknown)."""
    if seconds is None:
        return ""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
