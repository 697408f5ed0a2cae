"""The WhatsApp channel plugin (Cloud API): a webhook server of its own and a small aiohttp client.

Why not pywa: pywa 4.5 hard-codes the Graph API address (`GraphAPI.__init__` overwrites the
session's `base_url` with `https://graph.facebook.com/v{version}`), so it cannot be pointed at a
self-hosted proxy or a test fake without patching its internals; its update parser also reads
only the first message of a webhook post, while Meta batches several. The client here speaks the
documented Cloud API directly: `POST /{phone_number_id}/messages`, `POST /{phone_number_id}/media`,
`GET /{media_id}` and the signed webhook (`X-Hub-Signature-256`).

Profile keys: token_env (required), phone_number_id (required), app_secret_env (required),
verify_token_env, api_base_url, webhook_listen, webhook_port, webhook_path, allow_from, pairing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel

from gateway import ChannelContext, ChannelOptions, ChannelProfile, hookimpl
from gateway.api import ConfigurationError

if TYPE_CHECKING:
    from plugins.whatsapp.channel import WhatsAppChannel

CHANNEL_TYPE = "whatsapp"


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


@hookimpl
def switchyard_channel_options() -> dict[str, type[BaseModel]]:
    """Declares the keys a `type: whatsapp` profile may carry."""
    return {CHANNEL_TYPE: WhatsAppProfileOptions}


@hookimpl
def switchyard_channel_types() -> list[str]:
    """Declares the `whatsapp` channel type."""
    return [CHANNEL_TYPE]


@hookimpl
def switchyard_channels(profile: ChannelProfile, context: ChannelContext) -> WhatsAppChannel | None:
    """Builds the WhatsApp channel for `type: whatsapp` profiles."""
    if profile.type != CHANNEL_TYPE:
        return None
    try:
        import aiohttp  # noqa: F401 - imported here so the gateway starts fast without WhatsApp
    except ImportError as exc:
        raise ConfigurationError("aiohttp is not installed: pip install 'switchyard[whatsapp]'") from exc
    from plugins.whatsapp.channel import WhatsAppChannel

    return WhatsAppChannel(profile, context)
