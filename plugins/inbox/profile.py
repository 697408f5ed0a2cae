"""The keys a `type: inbox` profile may carry (imported by the plugin's `switchyard_channel_options` hook, so
building a plugin manager does not import pydantic)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gateway.settings import ChannelOptions


class InboxProfileOptions(ChannelOptions):
    """The keys of an inbox profile (paths relative to the home)."""

    root: str = "inbox"
    processed_root: str = "processed"
    failed_root: str = "failed"
    fatal_policy: Literal["leave", "move"] = "move"
    poll_ms: float = Field(default=1000, gt=0)
    settle_ms: float = Field(default=200, ge=0)
