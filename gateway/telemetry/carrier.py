"""The trace context a payload carries: which payload fields name its trace, and the trace its identity names.

A payload carries W3C trace context in two keys of its own (spec 002 payloads keep unknown keys):
`traceparent`, and `tracestate` holding `switchyard=<intake time, epoch ms>` (the start of its wait). One that
carries neither (a file another program dropped, `switchyard send`) is in the trace its identity names: a hash
of its channel, profile and messageId (`derived_ids`), the same on every host. Nothing here imports
opentelemetry.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Protocol, TypeVar


class Payload(Protocol):
    """An incoming payload as traces read it (gateway.models.IncomingPayload, which imports the tracing module)."""

    channel: str
    messageId: str  # noqa: N815 - the payload's own field name
    message: str
    timestamp: int

    @property
    def model_extra(self) -> dict[str, Any] | None: ...

    @property
    def profile(self) -> str: ...

    def model_copy(self: P, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> P: ...


P = TypeVar("P", bound=Payload)

STATE_KEY = "switchyard"
"""Our entry in `tracestate`: the message's intake time (epoch ms)."""


def fields_of(carrier: Any) -> dict[str, Any]:
    """What a payload carries for traces: its extra keys (`traceparent`, `tracestate`) and its identity."""
    if carrier is None:
        return {}
    if isinstance(carrier, Mapping):
        return {**carrier, "profile": carrier.get("channelProfileId") or carrier.get("channel")}
    return {**(carrier.model_extra or {}), "channel": carrier.channel, "profile": carrier.profile,
            "messageId": carrier.messageId}


def derived_ids(fields: Mapping[str, Any]) -> tuple[int, int] | None:
    """(trace id, parent span id) named by a message's identity (channel, profile, messageId), for a message that
    carries no trace context; None without an identity."""
    if not isinstance(fields.get("channel"), str) or not isinstance(fields.get("messageId"), str):
        return None
    digest = hashlib.sha256(f"{fields['channel']}/{fields.get('profile')}/{fields['messageId']}".encode()).digest()
    return int.from_bytes(digest[:16], "big") or 1, int.from_bytes(digest[16:24], "big") or 1


def queued_ms(tracestate: Any) -> int | None:
    """The intake time (epoch ms) our `tracestate` entry holds; None without one."""
    if not isinstance(tracestate, str):
        return None
    for entry in tracestate.split(","):
        key, _, value = entry.strip().partition("=")
        if key == STATE_KEY and value.isdigit():
            return int(value)
    return None

