"""The rules for one incoming message that every backend shares: reading a payload file's bytes (or
refusing them with a reason), the ordering keys it holds while it is processed (and the commands that
decide them), the wait before its next attempt, the apology its sender gets when it is dead-lettered, and the
"queued" receipt it gets while it waits behind others of its conversation."""

from __future__ import annotations

import contextlib
import hashlib
import json
from typing import TYPE_CHECKING

from pydantic import ValidationError

from gateway.channelkit.backoff import delay as backoff_delay
from gateway.home import safe_name
from gateway.models import IncomingPayload, OutgoingPayload, UnstorableText
from gateway.scope import ConversationScope
from gateway.settings import QueueSettings
from gateway.storable import unstorable
from gateway.telemetry.events import now_ms

if TYPE_CHECKING:
    from gateway.telemetry.events import EventLog

APOLOGY = (
    "Sorry, I could not process your message (\"{preview}\") after {attempts} attempt(s). "
    "It has been kept for the operator; please try again later."
)


def backoff_seconds(attempts: int, settings: QueueSettings) -> float:
    """Exponential backoff after `attempts` failures: initial × 2^(attempts-1), capped."""
    return backoff_delay(attempts, settings.backoff_initial_ms, settings.backoff_max_ms) / 1000


def parse_payload(data: bytes, max_bytes: int) -> IncomingPayload:
    """Validates a payload file's bytes; raises ValueError with a reason a person can act on.

    Any failure of the parsers counts as invalid input, not only ValueError: a deeply nested
    document makes `json.loads` raise RecursionError, which must send the file to failed/ like
    any other unparseable one instead of leaving it claimed forever. Text no store can hold (a NUL
    character, a lone surrogate: gateway.storable), in any value or key, is invalid input too
    (`UnstorableText`), on the file backend as on the postgres one.
    """
    if len(data) > max_bytes:
        raise ValueError(f"payload larger than queue.max_payload_bytes ({max_bytes} bytes)")
    if b"\\u0000" not in data:  # a NUL passes the fast parser; a lone surrogate never does
        with contextlib.suppress(Exception):  # a ValidationError, or anything else: explained below
            return IncomingPayload.model_validate_json(data)  # the common case, in one pass
    try:
        raw = json.loads(data)
    except RecursionError as exc:
        raise ValueError(f"not valid JSON: nested too deeply ({exc})") from exc
    except Exception as exc:
        raise ValueError(f"not valid JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise ValueError("not a JSON object")
    try:
        problem = unstorable(raw)
    except RecursionError as exc:
        raise ValueError(f"not valid JSON: nested too deeply ({exc})") from exc
    if problem is not None:
        raise UnstorableText(problem, raw)
    try:
        return IncomingPayload.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'payload'}: {e['msg']}" for e in exc.errors()
        )
        raise ValueError(f"wrong schema: {problems}") from exc
    except Exception as exc:
        raise ValueError(f"cannot validate: {type(exc).__name__}: {exc}") from exc


def message_identity(message: IncomingPayload) -> str:
    """(channel, channelProfileId, messageId) as one string."""
    return f"{message.channel}\x1f{message.profile}\x1f{message.messageId}"


def letter_name(message: IncomingPayload) -> str:
    """The dead letter's file name in failed/ (one per message identity): safe_name shortens and replaces
    characters, so ids such as `chat:1` and `chat/1` would share a name; a digest of the identity tells them apart."""
    digest = hashlib.sha256(message_identity(message).encode()).hexdigest()[:12]
    return f"answered-{safe_name(message.profile)}-{safe_name(message.messageId)}-{digest}.json"


CONTROL_COMMANDS = frozenset({"/stop", "/cancel"})
"""The commands that act on what runs now, so they must not wait behind it."""

READ_ONLY_COMMANDS = frozenset({"/status", "/progress", "/help", "/usage"})
"""The commands answered at once by built-in rules, reading only: they ask about what runs now, so they
must not wait behind it either."""

STATUS_WORDS = frozenset({"status", "progress", "/status", "/progress"})
"""A whole message asking a run's progress; the bare words are a status command only with a
`workflowRunId` (DESIGN.md: without one, `status` goes to the selector, and may answer a question)."""


def command_word(text: str) -> str:
    """A message's slash command, lower-cased and without the `@botname` Telegram adds in groups
    (`/Stop@my_bot now` → `/stop`); "" for a message that is no command."""
    stripped = text.lstrip()
    if not stripped.startswith("/"):
        return ""
    return stripped.split(maxsplit=1)[0].split("@", 1)[0].lower()


def is_control(message: IncomingPayload) -> bool:
    """A message that controls its conversation's running turn (`/stop`, `/cancel`, a tapped button)."""
    return message.job is None and (message.button is not None
                                    or command_word(message.message) in CONTROL_COMMANDS)


def is_read_only(message: IncomingPayload) -> bool:
    """A command the orchestrator answers at once without a provider, changing nothing (`/status`,
    `/progress`, `/help`, `/usage`; `status` or `progress` naming a run), recognised as it recognises them."""
    if message.job is not None:
        return False
    if command_word(message.message) in READ_ONLY_COMMANDS:
        return True
    return bool(message.workflowRunId) and message.message.strip().lower() in STATUS_WORDS


def ordering_keys(message: IncomingPayload) -> tuple[str, ...]:
    """The keys a message holds while it is processed: its run (if any) and its conversation.

    A control message (`is_control`) holds its conversation's control key instead, so it runs beside
    the conversation's running message (that is what it stops or answers) rather than after it; a
    read-only command (`is_read_only`) holds the control key in place of the conversation key too, and
    keeps the key of a run it names. Control messages of one conversation still run one at a time, in order.
    """
    scope = ConversationScope.of(message)
    control = f"ctl:{scope.path}"
    if is_control(message):
        return (control,)
    conversation = control if is_read_only(message) else scope.key  # the conversation's key is its scope
    if message.workflowRunId:
        return (f"run:{message.workflowRunId}", conversation)
    return (conversation,)


RECEIPT_AGENT = "switchyard"


def receipt_text(ahead: int) -> str:
    """What a waiting sender reads."""
    return f"queued behind {ahead} message{'s' if ahead != 1 else ''} of this conversation; I'll answer in turn"


def receipt_for(message: IncomingPayload, ahead: int) -> OutgoingPayload:
    """The receipt telling the sender of `message` that `ahead` messages of its conversation come first."""
    return OutgoingPayload.reply_to(message, receipt_text(ahead), agent=RECEIPT_AGENT, timestamp=now_ms(),
                                    receipt=True).model_copy(update={"files": []})


def receipt_sent(events: EventLog, message: IncomingPayload, ahead: int) -> None:
    """Records a receipt written for `message`."""
    events.emit("message.queued_receipt", channel=message.channel, conversation=message.conversation,
                messageId=message.messageId, ahead=ahead)
