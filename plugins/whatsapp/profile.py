"""The keys a `type: whatsapp` profile may carry (imported by the plugin's `switchyard_channel_options` hook, so
building a plugin manager does not import pydantic)."""

from __future__ import annotations

from gateway.settings import ChannelOptions


class WhatsAppProfileOptions(ChannelOptions):
    """The keys of a whatsapp profile (the channel checks which are required when it starts)."""

    token_env: str | None = None
    phone_number_id: str | int | None = None
    app_secret_env: str | None = None
    verify_token_env: str | None = None
    api_base_url: str | None = None
    webhook_listen: str | None = None
    webhook_port: int | None = None
    webhook_path: str | None = None

    @classmethod
    def unavailable(cls) -> str | None:
        """aiohttp not installed (the `whatsapp` extra)."""
        try:
            import aiohttp  # noqa: F401
        except ImportError:
            return "aiohttp is not installed: pip install '.[whatsapp]' in the Switchyard clone"
        return None
