"""The keys a `type: web` profile may carry (imported by the plugin's `switchyard_channel_options` hook, so
building a plugin manager does not import aiohttp)."""

from __future__ import annotations

from pydantic import Field

from gateway.config.fields import IdText
from gateway.settings import ChannelOptions

DEFAULT_PORT = 8787
MAX_UPLOAD_BYTES = 20 * 1024 * 1024


class WebProfileOptions(ChannelOptions):
    """The keys of a web chat profile."""

    host: str = "127.0.0.1"
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)  # 0: any free port (printed in the chat link)
    user: IdText | None = Field(default=None, pattern=r"^[A-Za-z0-9_@-][A-Za-z0-9_.@-]{0,63}$")
    """The browser user `switchyard run`'s login link signs in (default: the login name)."""
    room: bool = False  # a shared "room" conversation every user of this profile sees
    max_upload_bytes: int = Field(default=MAX_UPLOAD_BYTES, gt=0)
    max_connections: int = Field(default=64, gt=0)
    max_tabs_per_user: int = Field(default=8, gt=0)  # open WebSockets (tabs) one user may hold at once
    log_retention_days: float = Field(default=30, ge=0)  # conversation log entries older are dropped (0: kept)
    cache_conversations: int = Field(default=256, gt=0)  # conversation logs held in memory (least recent go)
    link_ttl_sec: float = Field(default=86400.0, gt=0)  # how long a login link stays usable (once)
    dashboard_url: str | None = None  # where the page's "dashboard" link points (operators)
