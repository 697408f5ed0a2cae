"""The keys a `type: slack` profile may carry (imported by the plugin's `switchyard_channel_options` hook, so
building a plugin manager does not import pydantic)."""

from __future__ import annotations

from typing import Literal

from gateway.settings import ChannelOptions


class SlackProfileOptions(ChannelOptions):
    """The keys of a slack profile (SlackConfig.from_profile reads them, with its defaults)."""

    mode: Literal["socket", "http"] = "socket"
    bot_token_env: str | None = None
    app_token_env: str | None = None
    signing_secret_env: str | None = None
    api_base_url: str | None = None
    http_path: str | None = None
    http_listen: str | None = None
    http_port: int | None = None
    text_limit: int | None = None
    typing_reaction: str | None = None

    @classmethod
    def unavailable(cls) -> str | None:
        """slack-bolt (or what it needs) not installed: the `slack` extra."""
        try:
            import plugins.slack.client
            import plugins.slack.transport  # noqa: F401
        except ImportError:
            return "slack-bolt is not installed: pip install '.[slack]' in the Switchyard clone"
        return None
