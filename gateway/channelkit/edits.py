"""An edit folded into the payload of the message it edits (issue 23 §3; the rule: gateway.stores.EditFolding).

Only the sender of a message edits it (issue 32 §5): an edit naming a waiting message of another sender is
queued as a message of its own from the sender it names, neither folded into that message nor an edit.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from pydantic import ValidationError

from gateway.models import IncomingPayload
from gateway.payloads import ordering_keys

if TYPE_CHECKING:
    from collections.abc import Callable

EDITED_PREFIX = "(edited) "
"""What the agent sees before the text of an edit of a message already taken (orchestrator/chat/handler.py)."""


class ForeignEdit(Exception):
    """An edit naming a waiting message that another sender wrote: no edit of it, but a message of its own."""


def edited_bytes(original: bytes, edit: IncomingPayload) -> bytes | None:
    """The original payload with the edit's text (its attachments stay the original's), or None when `original`
    is not the message `edit` edits (another channel, profile, conversation or messageId; not a payload) or the
    edit changes its ordering keys (a command that runs beside its conversation's running message edited
    into a message that waits behind it, or back): the edit is then a message of its own. Raises ForeignEdit
    when it is the message, but its sender is not the edit's (the platform reports an edit's author)."""
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
    if (body.get("senderId") or body.get("sender") or "") != (edit.senderId or edit.sender):
        raise ForeignEdit(f"{edit.messageId} edits {edit.editOf}, which another sender wrote")
    if _keys_of(body) != _keys_of({**body, "message": edit.message}):
        return None  # e.g. a text edited into `/status`: it would wait under the keys it no longer has
    body["message"] = edit.message
    return json.dumps(body).encode()


def to_queue(fold_edit: Callable[[IncomingPayload], bool], payload: IncomingPayload) -> IncomingPayload | None:
    """What to queue of a payload a channel handed in, given a store's `fold_edit` (gateway.stores.EditFolding):
    None when it was an edit now folded into its waiting original; the payload as a message of its own (no
    `editOf`) when the message it names waits but another sender wrote it; else the payload itself."""
    try:
        if payload.editOf and fold_edit(payload):
            return None
    except ForeignEdit:
        return payload.model_copy(update={"editOf": None})
    return payload


def _keys_of(body: dict[str, object]) -> tuple[str, ...] | None:
    """The ordering keys of a payload's fields (gateway.payloads), None when they are no payload."""
    try:
        return ordering_keys(IncomingPayload.model_validate(body))
    except ValidationError:
        return None
