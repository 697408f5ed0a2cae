"""An edit folded into the payload of the message it edits (issue 23 §3; the rule: gateway.stores.EditFolding)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.models import IncomingPayload

EDITED_PREFIX = "(edited) "
"""What the agent sees before the text of an edit of a message already taken (orchestrator/handler.py)."""


def edited_bytes(original: bytes, edit: IncomingPayload) -> bytes | None:
    """The original payload with the edit's text (its attachments stay the original's), or None when `original`
    is not the message `edit` edits (another channel, profile, conversation or messageId; not a payload)."""
    try:
        body = json.loads(original)
    except ValueError:
        return None
    if not isinstance(body, dict) or body.get("messageId") != edit.editOf or body.get("channel") != edit.channel:
        return None
    if (body.get("channelProfileId") or body["channel"]) != edit.profile:
        return None
    if (body.get("conversationId") or body.get("senderId") or body.get("sender")) != edit.conversation:
        return None
    body["message"] = edit.message
    return json.dumps(body).encode()
