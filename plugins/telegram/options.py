"""The settings of one telegram profile, read from its `channels:` entry and the environment."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway import ChannelProfile

CHANNEL_TYPE = "telegram"
DEFAULT_BASE_URL = "https://api.telegram.org/bot"
DEFAULT_BASE_FILE_URL = "https://api.telegram.org/file/bot"


@dataclass(frozen=True)
class TelegramOptions:
    """Where the Bot API is, how updates arrive (polling or webhook), and the reconnect pacing."""

    profile_id: str
    token_env: str
    base_url: str = DEFAULT_BASE_URL
    base_file_url: str = DEFAULT_BASE_FILE_URL
    mode: str = "polling"
    poll_timeout_sec: float = 10.0
    webhook_listen: str = "127.0.0.1"
    webhook_port: int = 8443
    webhook_path: str = ""
    webhook_url: str | None = None
    webhook_secret_env: str | None = None
    reconnect_initial_sec: float = 1.0
    reconnect_max_sec: float = 60.0

    @classmethod
    def from_profile(cls, profile: ChannelProfile) -> TelegramOptions:
        """Reads the profile's keys; raises ValueError naming a key that is missing or wrong."""
        token_env = profile.option("token_env")
        if not token_env or not isinstance(token_env, str):
            raise ValueError(f"telegram profile {profile.id!r} needs `token_env` (the environment "
                             "variable holding the bot token, e.g. TELEGRAM_BOT_TOKEN)")
        mode = str(profile.option("mode", "polling"))
        if mode not in ("polling", "webhook"):
            raise ValueError(f"telegram profile {profile.id!r}: `mode` must be polling or webhook, not {mode!r}")
        webhook_url = profile.option("webhook_url")
        if mode == "webhook" and not webhook_url:
            raise ValueError(f"telegram profile {profile.id!r}: webhook mode needs `webhook_url` "
                             "(the public HTTPS URL Telegram posts updates to)")
        return cls(
            profile_id=profile.id,
            token_env=token_env,
            base_url=str(profile.option("base_url", DEFAULT_BASE_URL)),
            base_file_url=str(profile.option("base_file_url", DEFAULT_BASE_FILE_URL)),
            mode=mode,
            poll_timeout_sec=_number(profile, "poll_timeout_sec", 10.0),
            webhook_listen=str(profile.option("webhook_listen", "127.0.0.1")),
            webhook_port=int(_number(profile, "webhook_port", 8443)),
            webhook_path=str(profile.option("webhook_path", f"telegram/{profile.id}")),
            webhook_url=str(webhook_url) if webhook_url else None,
            webhook_secret_env=profile.option("webhook_secret_env"),
            reconnect_initial_sec=_number(profile, "reconnect_initial_sec", 1.0),
            reconnect_max_sec=_number(profile, "reconnect_max_sec", 60.0),
        )

    def token(self) -> str:
        """The bot token from `token_env`; the error names the variable, never a value."""
        value = os.environ.get(self.token_env, "").strip()
        if not value:
            from gateway.api import ConfigurationError  # imported on use: `status` loads this module

            raise ConfigurationError(f"telegram profile {self.profile_id!r}: environment variable "
                               f"{self.token_env} (token_env) is not set or empty")
        return value

    def webhook_secret(self) -> str | None:
        """The secret Telegram must send in X-Telegram-Bot-Api-Secret-Token (None: not checked)."""
        if not self.webhook_secret_env:
            return None
        value = os.environ.get(self.webhook_secret_env, "").strip()
        if not value:
            from gateway.api import ConfigurationError  # imported on use: `status` loads this module

            raise ConfigurationError(f"telegram profile {self.profile_id!r}: environment variable "
                               f"{self.webhook_secret_env} (webhook_secret_env) is not set or empty")
        return value


def _number(profile: ChannelProfile, key: str, default: float) -> float:
    value: Any = profile.option(key, default)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"telegram profile {profile.id!r}: `{key}` must be a number, not {value!r}") from None
