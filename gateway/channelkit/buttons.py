"""One-tap answers under a reply (`OutgoingPayload.buttons`): the numbered list a channel without buttons
shows instead, and the reply part a channel with buttons puts them on."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.models import Button

MAX_ID_BYTES = 64  # the longest button id every platform carries back (Telegram's callback_data)


def numbered(text: str, buttons: Sequence[Button]) -> str:
    """`text` followed by the buttons as a numbered list and how to answer ("Reply 1, 2 or 3"); the
    user's numbered reply arrives as ordinary text. `text` unchanged when there are no buttons."""
    if not buttons:
        return text
    options = "\n".join(f"{number}. {button.label}" for number, button in enumerate(buttons, 1))
    return "\n\n".join(part for part in (text.rstrip(), f"{options}\n{how_to_answer(len(buttons))}") if part)


def how_to_answer(count: int) -> str:
    """"Reply 1", "Reply 1 or 2", "Reply 1, 2 or 3", … for `count` numbered options."""
    numbers = [str(number) for number in range(1, count + 1)]
    return "Reply " + (numbers[0] if count == 1 else f"{', '.join(numbers[:-1])} or {numbers[-1]}")


def fits(button: Button) -> bool:
    """Whether a button's id fits every platform (at most MAX_ID_BYTES bytes of UTF-8)."""
    return 0 < len(button.id.encode()) <= MAX_ID_BYTES
