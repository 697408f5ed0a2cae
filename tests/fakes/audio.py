"""Real speech made at test time: espeak-ng speaks a sentence to WAV, opusenc (opus-tools) turns it into
the OGG/Opus voice notes Telegram, WhatsApp and Discord carry. Tests skip, saying why, where the tools are
missing (.ci/run installs them)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TOOLS = ("espeak-ng", "opusenc", "ffprobe")
TRANSCRIBER = Path(__file__).with_name("transcriber.py")


def need_audio_tools() -> None:
    """Skips the test when a tool that makes or measures the audio is not installed."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (apt-get install espeak-ng opus-tools ffmpeg)")


def spoken_ogg(text: str, folder: Path) -> bytes:
    """`text` spoken by espeak-ng, as OGG/Opus bytes."""
    need_audio_tools()
    wav, ogg = folder / "speech.wav", folder / "speech.ogg"
    subprocess.run(["espeak-ng", "-w", str(wav), text], check=True, capture_output=True, timeout=60)
    subprocess.run(["opusenc", "--quiet", str(wav), str(ogg)], check=True, capture_output=True, timeout=60)
    data = ogg.read_bytes()
    assert data[:4] == b"OggS" and b"OpusHead" in data[:64]
    return data


def seconds_of(data: bytes, folder: Path) -> float:
    """The length of the audio in `data` as ffprobe reads it."""
    path = folder / "measured.ogg"
    path.write_bytes(data)
    result = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "format=duration", "-of",
                             "default=nw=1:nk=1", str(path)], check=True, capture_output=True, text=True, timeout=60)
    return float(result.stdout.strip())


def fake_transcriber(folder: Path, transcripts: dict[bytes, str]) -> list[str]:
    """The `transcribe:` command of the fake transcriber (tests/fakes/transcriber.py), which knows the
    text of exactly these audio files (by their bytes' SHA-256)."""
    table = folder / "transcripts.json"
    table.write_text(json.dumps({hashlib.sha256(data).hexdigest(): text for data, text in transcripts.items()}))
    return [sys.executable, str(TRANSCRIBER), "--table", str(table), "{file}"]
