"""Sends a reply through its channel with its files opened for upload (the delivery loop, gateway/runtime/sending.py,
calls it for both backends): apart from attachments.py, which knows no Channel."""

from __future__ import annotations

from gateway.api import Channel, DeliveryRecord
from gateway.channelkit.attachments import AttachmentPolicy, note_refusals, open_files
from gateway.models import OutgoingPayload
from gateway.telemetry.events import EventLog


async def send_with_files(channel: Channel, payload: OutgoingPayload, policy: AttachmentPolicy,
                          events: EventLog) -> DeliveryRecord | None:
    """Sends a payload through `channel` with its files opened for upload now (both backends' delivery);
    the ones `policy` refuses now are left out and named in the text."""
    opened, refused = open_files(payload, policy)
    if refused:
        opened = note_refusals(opened, refused, events, stage="delivery")
    try:
        return await channel.send(opened)
    finally:
        opened.close_files()
