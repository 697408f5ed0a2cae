"""What the Bot API allows and refuses: text lengths in UTF-16 units, the wait a RetryAfter asks for,
refusals that retrying cannot change, the size of a file and of a photo (used by plugins.telegram.files)."""

from __future__ import annotations

import warnings
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from gateway import OutgoingPayload, Part, reply_parts

if TYPE_CHECKING:
    from telegram.error import RetryAfter, TelegramError

TEXT_LIMIT = 4096  # counted by Telegram in UTF-16 code units
CAPTION_LIMIT = 1024  # a file's caption, "0-1024 characters after entities parsing"
MIB = 1 << 20
FILE_LIMIT = 50 * MIB
"""The largest file a bot uploads, by any method ("Bots can currently send files of any type of up to 50 MB in
size", https://core.telegram.org/bots/api#sending-files); the chat tool refuses a larger one before sending
(the plugin's `switchyard_file_limits`)."""
PHOTO_LIMIT = 10 * MIB  # sendPhoto: "The photo must be at most 10 MB in size"; a larger image goes as a document
PHOTO_SIDES_LIMIT = 10_000  # sendPhoto: "The photo's width and height must not exceed 10000 in total"
PHOTO_RATIO_LIMIT = 20  # sendPhoto: "Width and height ratio must be at most 20"


def refused_for_good(exc: TelegramError) -> bool:
    """Whether retrying cannot help: the bot was blocked or removed (403), or the chat is gone."""
    from telegram.error import BadRequest, Forbidden

    return isinstance(exc, Forbidden) or (isinstance(exc, BadRequest) and "chat not found" in str(exc).lower())


def telegram_parts(outgoing: OutgoingPayload) -> list[Part]:
    """The reply's parts, text chunks within 4096 UTF-16 units (emoji count twice), blank ones left out;
    the last text chunk carries the reply's buttons (an inline keyboard)."""
    limit = TEXT_LIMIT
    parts = reply_parts(outgoing, limit, shows_buttons=True)
    while limit > TEXT_LIMIT // 2 and any(utf16_len(p.text) > TEXT_LIMIT for p in parts if p.text):
        limit -= 512
        parts = reply_parts(outgoing, limit, shows_buttons=True)
    parts = [part for part in parts if part.file is not None or (part.text or "").strip()]
    return captioned(outgoing, parts)


def captioned(outgoing: OutgoingPayload, parts: list[Part]) -> list[Part]:
    """One file with a short text and no buttons (a chat tool's `send_file` with its caption) is one message:
    the file with the text as its caption. The part keeps the file's index, so a delivery journaled before
    (its text sent, its file not) sends the file, never skips it. Not for a streamed answer, whose first text
    part replaces its preview (gateway.channelkit.notes.replacing_preview)."""
    texts = [part for part in parts if part.file is None]
    files = [part for part in parts if part.file is not None]
    if (outgoing.stream_key is not None or len(files) != 1 or len(texts) != 1 or texts[0].buttons
            or utf16_len(texts[0].text or "") > CAPTION_LIMIT):
        return parts
    return [Part(files[0].index, text=texts[0].text, file=files[0].file)]


def retry_seconds(exc: RetryAfter) -> float:
    """The wait a RetryAfter asks for; python-telegram-bot gives an int or a timedelta."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # PTB warns that the int form is going away
        value: Any = exc.retry_after
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2

