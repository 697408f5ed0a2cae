"""The rules for one incoming message that both backends share: reading a payload file's bytes (or
refusing them with a reason), the wait before its next attempt, and the apology its sender gets when it
is dead-lettered."""

from __future__ import annotations

import contextlib
import hashlib
import json

from pydantic import ValidationError

from gateway.channelkit.backoff import delay as backoff_delay
from gateway.home import safe_name
from gateway.models import IncomingPayload, UnstorableText
from gateway.settings import QueueSettings
from gateway.storable import unstorable

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
