"""A Slack profile's settings: which mode, where the secrets live, where the API and listener are."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway import ChannelProfile

CHANNEL_TYPE = "slack"
FILE_LIMIT = 1 << 30
"""Slack's limit on one uploaded file, 1 GB (files.getUploadURLExternal / files.completeUploadExternal, which
slack_sdk's files_upload_v2 calls); the chat tool refuses a larger file before sending."""
MAX_TEXT_LIMIT = 40_000  # Slack truncates chat.postMessage text beyond 40,000 characters
MODES = ("socket", "http")


@dataclass(frozen=True)
class SlackConfig:
    """The type-specific keys of one `type: slack` profile, validated, with their defaults."""

    profile_id: str
    mode: str = "socket"
    bot_token_env: str = "SLACK_BOT_TOKEN"
    app_token_env: str = "SLACK_APP_TOKEN"
    signing_secret_env: str = "SLACK_SIGNING_SECRET"
    api_base_url: str = "https://slack.com/api/"
    http_listen: str = "127.0.0.1"
    http_port: int = 3000
    http_path: str = "/slack/events"
    typing_reaction: str = "eyes"
    text_limit: int = MAX_TEXT_LIMIT

    @classmethod
    def from_profile(cls, profile: ChannelProfile) -> SlackConfig:
        """Reads and checks the profile's keys; raises ValueError naming a bad key."""
        mode = str(profile.option("mode", "socket"))
        if mode not in MODES:
            raise ValueError(f"channels[{profile.id}].mode: expected one of {', '.join(MODES)}, got {mode!r}")
        limit = int(profile.option("text_limit", MAX_TEXT_LIMIT))
        if not 1 <= limit <= MAX_TEXT_LIMIT:
            raise ValueError(f"channels[{profile.id}].text_limit: must be between 1 and {MAX_TEXT_LIMIT}")
        base = str(profile.option("api_base_url", cls.api_base_url))
        path = str(profile.option("http_path", cls.http_path))
        return cls(
            profile_id=profile.id,
            mode=mode,
            bot_token_env=str(profile.option("bot_token_env", cls.bot_token_env)),
            app_token_env=str(profile.option("app_token_env", cls.app_token_env)),
            signing_secret_env=str(profile.option("signing_secret_env", cls.signing_secret_env)),
            api_base_url=base if base.endswith("/") else base + "/",
            http_listen=str(profile.option("http_listen", cls.http_listen)),
            http_port=int(profile.option("http_port", cls.http_port)),
            http_path=path if path.startswith("/") else "/" + path,
            typing_reaction=str(profile.option("typing_reaction", cls.typing_reaction) or ""),
            text_limit=limit,
        )

    def secret(self, key: str) -> str:
        """The value of the environment variable named by the `*_env` key `key`; raises when unset.

        The message names the key and the variable, never a value.
        """
        name: str = getattr(self, key)
        value = os.environ.get(name, "").strip()
        if not value:
            from gateway.api import ConfigurationError  # imported on use: `status` loads this module

            raise ConfigurationError(f"slack profile {self.profile_id!r}: environment variable {name} "
                               f"(named by {key}) is not set")
        return value
