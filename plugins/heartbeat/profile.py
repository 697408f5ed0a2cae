"""The keys a `type: heartbeat` profile may carry (imported by the plugin's `switchyard_channel_options` hook, so
building a plugin manager does not import pydantic)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from gateway.config.fields import IdText
from gateway.settings import ChannelOptions


class HeartbeatNotify(BaseModel):
    """Where a non-OK answer is forwarded."""

    profile: str
    conversationId: IdText | None = None  # noqa: N815 - the payload's own field name


class HeartbeatProfileOptions(ChannelOptions):
    """The keys of a heartbeat profile."""

    interval_sec: float = Field(default=60, gt=0)
    message: str = "heartbeat"
    notify: HeartbeatNotify | None = None
