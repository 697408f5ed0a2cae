"""What every channel's voice-note test checks: the queued payload marks the downloaded file as audio, the
file holds the exact bytes the platform carried, and the orchestrator's transcriber turns it into text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gateway.models import IncomingPayload
from gateway.settings import Settings, TranscribeSettings
from gateway.testing import async_wait_until
from gateway.testing.conformance import ChannelRig
from orchestrator.agents.providers import ProviderRunner
from orchestrator.agents.transcribe import Transcriber
from tests.fakes.audio import fake_transcriber, spoken_ogg
from tests.fakes.stores import file_sessions

SPOKEN = "please summarise the last build"


def voice_bytes(tmp_path: Path) -> bytes:
    """A real OGG/Opus voice note saying SPOKEN (skips without espeak-ng, opus-tools, ffprobe)."""
    folder = tmp_path / "speech"
    folder.mkdir(exist_ok=True)
    return spoken_ogg(SPOKEN, folder)


async def queued_voice(rig: ChannelRig, data: bytes, mime: str) -> dict[str, Any]:
    """The payload the channel queued for a voice note, checked: one `audio` entry for its one file, whose
    bytes are the voice note's, with this MIME type."""
    payload = (await async_wait_until(rig.incoming))[0]
    [entry] = payload["audio"]
    assert payload["files"] == [entry["path"]] and f"[file: {entry['path']}]" in payload["message"]
    assert Path(entry["path"]).read_bytes() == data and entry["mime"] == mime
    return payload


async def transcribed(rig: ChannelRig, payload: dict[str, Any], data: bytes, tmp_path: Path) -> str:
    """The payload's text once the orchestrator's transcriber (the fake, knowing `data`) has read it."""
    assert rig.context is not None
    home = rig.context.home
    settings = Settings(transcribe=TranscribeSettings(command=fake_transcriber(tmp_path, {data: SPOKEN})))
    runner = ProviderRunner(home, {}, {}, sessions=file_sessions(home))
    try:
        message = await Transcriber(home, settings, runner).transcribed(IncomingPayload.model_validate(payload))
    finally:
        await runner.close()
    return message.message
