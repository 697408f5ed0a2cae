"""Which native kind a file goes as: Telegram's send methods by the Bot API's rules, WhatsApp's media types by
the Cloud API's MIME types and sizes."""

from __future__ import annotations

import struct

import pytest

from plugins.telegram.files import kind_of
from plugins.telegram.limits import PHOTO_LIMIT
from plugins.whatsapp.media import media_kind
from tests.e2e.test_chat_tools_files import MP3, ZIP, png

MIB = 1 << 20


def jpeg(width: int, height: int) -> bytes:
    """SOI, an APP0 segment, then a baseline SOF0 naming the frame size."""
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00" + b"\x00" * 9
    sof0 = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + sof0 + b"\xff\xd9"


OPUS = b"OggS\x00\x02" + b"\x00" * 22 + b"OpusHead\x01\x01"
VORBIS = b"OggS\x00\x02" + b"\x00" * 22 + b"\x01vorbis"


@pytest.mark.parametrize(("name", "data", "kind"), [
    ("chart.png", png(), "photo"),
    ("photo.jpg", jpeg(1280, 720), "photo"),
    ("sticker.webp", b"RIFF\x00\x00\x00\x00WEBPVP8 ", "photo"),
    ("fake.png", b"not an image", "document"),  # the bytes decide, not the name
    ("tall.jpg", jpeg(100, 2500), "document"),  # a ratio of 25: beyond sendPhoto's 20
    ("huge.png", png(6000, 5000), "document"),  # 11000 in total: beyond 10000
    ("song.mp3", MP3, "audio"),
    ("talk.m4a", b"\x00\x00\x00\x20ftypM4A ", "audio"),
    ("note.ogg", OPUS, "voice"),
    ("tune.ogg", VORBIS, "document"),  # sendAudio takes MP3 and M4A only
    ("clip.mp4", b"\x00\x00\x00\x20ftypisom", "video"),
    ("logs.zip", ZIP, "document"),
])
def test_telegram_sends_each_file_by_its_type(name: str, data: bytes, kind: str) -> None:
    assert kind_of(name, data) == kind


def test_an_image_over_10_mb_is_a_telegram_document() -> None:
    assert kind_of("big.png", png() + b"\x00" * PHOTO_LIMIT) == "document"


@pytest.mark.parametrize(("name", "size", "kind"), [
    ("chart.png", 1000, "image"), ("chart.png", 6 * MIB, "document"), ("photo.jpeg", 1000, "image"),
    ("sticker.webp", 1000, "document"), ("song.mp3", 1000, "audio"), ("song.mp3", 17 * MIB, "document"),
    ("clip.mp4", 1000, "video"), ("logs.zip", 1000, "document"),
])
def test_whatsapp_sends_each_file_as_its_media_type(name: str, size: int, kind: str) -> None:
    assert media_kind(name, size) == kind
