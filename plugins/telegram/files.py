"""How a file goes to Telegram: natively by its type, within the Bot API's limits, a document when in doubt.

The Bot API (https://core.telegram.org/bots/api) shows a file by the method it is sent with:
- sendPhoto: a JPEG, PNG or WebP of at most 10 MB whose "width and height must not exceed 10000 in total"
  and whose "width and height ratio must be at most 20" (checked here when the header says; else Telegram
  decides);
- sendAudio: "Your audio must be in the .MP3 or .M4A format" (the music player);
- sendVoice: "an .OGG file encoded with OPUS" (a voice note; an Ogg file without an Opus stream is a document,
  as the Bot API says other formats go);
- sendVideo: "Telegram clients support MPEG4 videos (other formats may be sent as Document)";
- sendDocument: anything else, of up to 50 MB ("Bots can currently send files of any type of up to 50 MB").

A native send the platform refuses for the file itself (PHOTO_INVALID_DIMENSIONS, IMAGE_PROCESS_FAILED, a
voice note the user's privacy settings forbid) is sent once more as a document: a refused call posted
nothing, so the document is the only message.
"""

from __future__ import annotations

import mimetypes
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from plugins.telegram.limits import FILE_LIMIT, MIB, PHOTO_LIMIT, PHOTO_RATIO_LIMIT, PHOTO_SIDES_LIMIT

if TYPE_CHECKING:
    from telegram import Bot, Message, ReplyParameters
    from telegram.error import BadRequest

PHOTO_TYPES = ("image/jpeg", "image/png", "image/webp")
AUDIO_TYPES = ("audio/mpeg", "audio/mp4", "audio/x-m4a", "audio/m4a")
VIDEO_TYPES = ("video/mp4",)
OGG_TYPES = ("audio/ogg", "audio/opus", "application/ogg")
REFUSED_MEDIA = ("photo_", "image_process_failed", "voice_messages_forbidden", "wrong file", "wrong type")
"""Lower-cased words of a BadRequest refusing the file as that kind of media (not the chat, not the caption)."""


TOO_LARGE_NOTE = "[file not sent: {name} is {size:.1f} MB; Telegram takes files of up to {limit} MB]"


@dataclass(frozen=True)
class Upload:
    """One file to send: its name, bytes and the caption under it."""

    name: str
    data: bytes
    caption: str | None = None


def too_large(name: str, data: bytes) -> str | None:
    """The note that replaces a file over the Bot API's 50 MB (a reply's `[send_file:]` tag; the chat tool
    refuses one before sending): Telegram would refuse it on every retry, and the rest of the reply goes."""
    if len(data) <= FILE_LIMIT:
        return None
    return TOO_LARGE_NOTE.format(name=name, size=len(data) / MIB, limit=FILE_LIMIT // MIB)


def kind_of(name: str, data: bytes) -> str:
    """The Bot API method family a file goes by: photo, audio, voice, video or document (see the docstring)."""
    mime = (mimetypes.guess_type(name)[0] or "").lower()
    image = _image_type(data)
    if image is not None and (mime in PHOTO_TYPES or not mime):
        return "photo" if _photo_fits(image, data) else "document"
    if mime in AUDIO_TYPES or name.lower().endswith(".m4a"):
        return "audio"
    if mime in OGG_TYPES or name.lower().endswith((".ogg", ".oga", ".opus")):
        return "voice" if _opus_in_ogg(data) else "document"
    if mime in VIDEO_TYPES:
        return "video"
    return "document"


async def send_upload(bot: Bot, chat: int | str, upload: Upload, *, topic: int | None,
                      quote: ReplyParameters | None) -> Message:
    """Sends the file natively; a refusal of it as that media (see REFUSED_MEDIA) sends it as a document once."""
    from telegram.error import BadRequest

    kind = kind_of(upload.name, upload.data)
    common: dict[str, Any] = {"caption": upload.caption or None, "message_thread_id": topic,
                              "reply_parameters": quote}
    if kind != "document":
        try:
            return await _native(bot, chat, kind, upload, common)
        except BadRequest as exc:
            if not refuses_the_media(exc):
                raise
    return await bot.send_document(chat, document=upload.data, filename=upload.name, **common)


def refuses_the_media(exc: BadRequest) -> bool:
    """Whether a BadRequest refuses the file as photo/audio/voice/video, so it may still go as a document."""
    wording = str(exc).lower()
    return any(word in wording for word in REFUSED_MEDIA)


async def _native(bot: Bot, chat: int | str, kind: str, upload: Upload, common: dict[str, Any]) -> Message:
    if kind == "photo":
        return await bot.send_photo(chat, photo=upload.data, filename=upload.name, **common)
    if kind == "audio":
        return await bot.send_audio(chat, audio=upload.data, filename=upload.name, **common)
    if kind == "voice":
        return await bot.send_voice(chat, voice=upload.data, filename=upload.name, **common)
    return await bot.send_video(chat, video=upload.data, filename=upload.name, **common)


def _image_type(data: bytes) -> str | None:
    """The image format the bytes begin with (not the name: a .png that is no PNG is a document)."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if data.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return None


def _photo_fits(image: str, data: bytes) -> bool:
    """Within sendPhoto's size and, when the header gives them, its dimensions."""
    if len(data) > PHOTO_LIMIT:
        return False
    size = _png_size(data) if image == "png" else _jpeg_size(data) if image == "jpeg" else None
    if size is None:
        return True  # not read here: Telegram decides, a refusal falls back to a document
    width, height = size
    return (min(width, height) > 0 and width + height <= PHOTO_SIDES_LIMIT
            and max(width, height) <= PHOTO_RATIO_LIMIT * min(width, height))


def _png_size(data: bytes) -> tuple[int, int] | None:
    if len(data) < 24 or data[12:16] != b"IHDR":
        return None
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """The frame size from the first SOF marker (baseline, progressive, …), walking the segments."""
    offset = 2
    while offset + 9 <= len(data) and data[offset] == 0xFF:
        marker = data[offset + 1]
        length = int.from_bytes(data[offset + 2:offset + 4], "big")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[offset + 5:offset + 9])
            return int(width), int(height)
        offset += 2 + length
    return None


def _opus_in_ogg(data: bytes) -> bool:
    """An Ogg stream whose first packet is an Opus header (RFC 7845: "OpusHead" in the first page)."""
    return data.startswith(b"OggS") and b"OpusHead" in data[:128]
