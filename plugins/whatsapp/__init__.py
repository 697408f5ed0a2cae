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

from gateway import hookimpl

if TYPE_CHECKING:
    from pydantic import BaseModel

    from gateway import ChannelContext, ChannelProfile
    from plugins.whatsapp.channel import WhatsAppChannel

CHANNEL_TYPE = "whatsapp"


@hookimpl
def switchyard_channel_options() -> dict[str, type[BaseModel]]:
    """Declares the keys a `type: whatsapp` profile may carry."""
    from plugins.whatsapp.profile import WhatsAppProfileOptions

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
    from gateway.api import ConfigurationError
    from plugins.whatsapp.profile import WhatsAppProfileOptions

    problem = WhatsAppProfileOptions.unavailable()  # imports aiohttp here: the gateway starts fast without it
    if problem is not None:
        raise ConfigurationError(problem)
    from plugins.whatsapp.channel import WhatsAppChannel

    return WhatsAppChannel(profile, context)


@hookimpl
def switchyard_file_limits() -> dict[str, int]:
    """The largest media the Cloud API takes, a document's (plugins.whatsapp.media.FILE_LIMIT); smaller limits
    per type send a larger image, audio or video as a document."""
    from plugins.whatsapp.media import FILE_LIMIT

    return {CHANNEL_TYPE: FILE_LIMIT}
