"""An edit folded into the payload of the message it edits (issue 23 §3; the rule: gateway.stores.EditFolding)."""

from __future__ import annotations

import json

from pydantic import ValidationError

from gateway.keys import ordering_keys
from gateway.models import IncomingPayload

EDITED_PREFIX = "(edited) "
"""What the agent sees before the text of an edit of a message already taken (orchestrator/handler.py)."""


def edited_bytes(original: bytes, edit: IncomingPayload) -> bytes | None:
    """The original payload with the edit's text (its attachments stay the original's), or None when `original`
    is not the message `edit` edits (another channel, profile, conversation or messageId; not a payload) or the
    edit changes its ordering keys (a command that runs beside its conversation's running message edited
    into a message that waits behind it, or back): the edit is then a message of its own."""
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
    if _keys_of(body) != _keys_of({**body, "message": edit.message}):
        return None  # e.g. a text edited into `/status`: it would wait under the keys it no longer has
    body["message"] = edit.message
    return json.dumps(body).encode()


def _keys_of(body: dict[str, object]) -> tuple[str, ...] | None:
    """The ordering keys of a payload's fields (gateway.keys), None when they are no payload."""
    try:
        return ordering_keys(IncomingPayload.model_validate(body))
    except ValidationError:
        return None
