"""A reply's buttons as Block Kit: the text in section blocks, then one actions block of buttons; and the
same message once a button was tapped (the buttons replaced by who answered what)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway import Button, split_message

SECTION_LIMIT = 3000  # characters of mrkdwn text in one section block
LABEL_LIMIT = 75  # characters of a button's plain_text
ACTIONS_BLOCK = "switchyard-buttons"


def button_blocks(text: str, buttons: Sequence[Button]) -> list[dict[str, Any]]:
    """Section blocks holding `text` (split at 3000 characters), then an actions block with one button per
    Button (action_id and value = the button's id)."""
    sections = [{"type": "section", "text": {"type": "mrkdwn", "text": chunk}}
                for chunk in split_message(text, SECTION_LIMIT)]
    elements = [{"type": "button", "action_id": button.id, "value": button.id,
                 "text": {"type": "plain_text", "text": button.label[:LABEL_LIMIT], "emoji": True}}
                for button in buttons]
    return [*sections, {"type": "actions", "block_id": ACTIONS_BLOCK, "elements": elements}]


def answered_blocks(blocks: Sequence[dict[str, Any]], label: str, user: str) -> list[dict[str, Any]]:
    """The message's blocks with its buttons replaced by "answered: <label>" and who answered."""
    kept = [block for block in blocks if block.get("type") != "actions"]
    note = {"type": "context", "elements": [{"type": "mrkdwn", "text": f"answered: {label} (<@{user}>)"}]}
    return [*kept, note]
