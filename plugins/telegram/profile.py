"""The keys a `type: telegram` profile may carry (imported by the plugin's `switchyard_channel_options` hook, so
building a plugin manager does not import pydantic)."""

from __future__ import annotations

from typing import Literal

from gateway.settings import ChannelOptions


class TelegramProfileOptions(ChannelOptions):
    """The keys of a telegram profile (TelegramOptions.from_profile reads them and checks what they need)."""

    token_env: str | None = None
    base_url: str | None = None
    base_file_url: str | None = None
    mode: Literal["polling", "webhook"] = "polling"
    poll_timeout_sec: float | None = None
    webhook_listen: str | None = None
    webhook_port: int | None = None
    webhook_path: str | None = None
    webhook_url: str | None = None
    webhook_secret_env: str | None = None
    reconnect_initial_sec: float | None = None
    reconnect_max_sec: float | None = None

    @classmethod
    def unavailable(cls) -> str | None:
        """python-telegram-bot not installed (it is the `telegram` extra)."""
        try:
            import telegram.ext  # noqa: F401
        except ImportError:
            return "python-telegram-bot is not installed: pip install '.[telegram]' in the Switchyard clone"
        return None
