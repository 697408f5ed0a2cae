"""The rules for one incoming message that both backends share: reading a payload file's bytes (or
refusing them with a reason), the wait before its next attempt, and the apology its sender gets when it
is dead-lettered."""

from __future__ import annotations

import contextlib
import json

from pydantic import ValidationError

from gateway.backoff import delay as backoff_delay
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
