"""What the Bot API allows and refuses: text lengths in UTF-16 units, the wait a RetryAfter asks for,
refusals that retrying cannot change."""

from __future__ import annotations

import warnings
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from gateway import OutgoingPayload, Part, reply_parts

if TYPE_CHECKING:
    from telegram.error import RetryAfter, TelegramError

TEXT_LIMIT = 4096  # counted by Telegram in UTF-16 code units


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
    return [part for part in parts if part.file is not None or (part.text or "").strip()]


def retry_seconds(exc: RetryAfter) -> float:
    """The wait a RetryAfter asks for; python-telegram-bot gives an int or a timedelta."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # PTB warns that the int form is going away
        value: Any = exc.retry_after
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2

