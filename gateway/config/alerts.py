"""`alerts:` in settings.yaml: which failures the operators are told of, in which conversation, how often."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field

from gateway.config.fields import IdText
from gateway.config.strict import Strict

AlertKind = Literal["dead_letter", "channel", "provider_login", "usage_limit", "database", "run_failed"]
ALERT_KINDS: tuple[AlertKind, ...] = get_args(AlertKind)


class AlertTarget(Strict):
    """The conversation alerts are sent to: a configured channel profile and a conversation of it."""

    profile: str
    conversationId: IdText | None = None  # noqa: N815 - the payload's own field name


class AlertSettings(Strict):
    """`alerts:`: what the operators are told, where, and how often (gateway/telemetry/alerts.py)."""

    to: AlertTarget
    send: list[AlertKind] = Field(default_factory=lambda: list(ALERT_KINDS))
    group_wait_sec: float = Field(default=10, ge=0)  # after the first alert, wait this long for others to join it
    group_interval_sec: float = Field(default=60, ge=0)  # at most one alert message this often
    channel_retrying_min: float = Field(default=5, ge=0)  # a channel still retrying after this long is reported
    database_unreachable_sec: float = Field(default=30, ge=0)  # the database unreachable this long is reported
