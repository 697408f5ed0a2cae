"""Switchyard's runtime core, and the public API for channel plugins and the orchestrator.

Names are imported on first use (PEP 562), so `switchyard --help` does not pay for pydantic and the
runtime modules; `from gateway import Channel` works as before.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from gateway.hookspecs import hookimpl

if TYPE_CHECKING:
    from gateway.api import (
        INTAKE_FAILED_REPLY,
        Channel,
        ChannelContext,
        ConfigurationError,
        DeliveryError,
        DeliveryRecord,
        FunctionSpec,
        Handler,
        HandlerContext,
        Outbox,
        PermanentError,
        Sink,
        StatusCache,
    )
    from gateway.channelkit.access import AccessDecision, AccessPolicy
    from gateway.channelkit.attachments import (
        AttachmentPolicy,
        AttachmentRefused,
        attachment_folder,
        open_attachment,
        read_attachment,
    )
    from gateway.channelkit.audio import audio_note, is_audio, with_audio
    from gateway.channelkit.buttons import numbered
    from gateway.channelkit.chunking import split_message
    from gateway.channelkit.delivery import DeliveryJournal, Part, RunThreads, deliver_parts, delivery_key, reply_parts
    from gateway.channelkit.notes import NoteMessages, clip_note, deliver_note, replacing_preview
    from gateway.home import Home, atomic_write, safe_name
    from gateway.models import Button, IncomingPayload, Job, OutgoingPayload, split_send_file_tags
    from gateway.scope import ConversationScope
    from gateway.settings import ChannelOptions, ChannelProfile, ProviderSettings, Settings, SettingsError
    from gateway.telemetry.events import EventLog, now_ms, utc_now_iso
    from gateway.telemetry.logs import divert_log_lines

_SOURCES: dict[str, tuple[str, ...]] = {
    "gateway.channelkit.access": ("AccessDecision", "AccessPolicy"),
    "gateway.api": ("INTAKE_FAILED_REPLY", "Channel", "ChannelContext", "ConfigurationError", "DeliveryError",
                    "DeliveryRecord", "FunctionSpec", "Handler", "HandlerContext", "Outbox", "PermanentError",
                    "Sink", "StatusCache"),
    "gateway.channelkit.attachments": ("AttachmentPolicy", "AttachmentRefused", "attachment_folder", "open_attachment",
                            "read_attachment"),
    "gateway.channelkit.audio": ("audio_note", "is_audio", "with_audio"),
    "gateway.channelkit.buttons": ("numbered",),
    "gateway.channelkit.chunking": ("split_message",),
    "gateway.channelkit.delivery": ("DeliveryJournal", "Part", "RunThreads", "deliver_parts", "delivery_key",
                                    "reply_parts"),
    "gateway.telemetry.events": ("EventLog", "now_ms", "utc_now_iso"),
    "gateway.home": ("Home", "atomic_write", "safe_name"),
    "gateway.telemetry.logs": ("divert_log_lines",),
    "gateway.models": ("Button", "IncomingPayload", "Job", "OutgoingPayload", "split_send_file_tags"),
    "gateway.scope": ("ConversationScope",),
    "gateway.channelkit.notes": ("NoteMessages", "clip_note", "deliver_note", "replacing_preview"),
    "gateway.settings": ("ChannelOptions", "ChannelProfile", "ProviderSettings", "Settings", "SettingsError"),
}
_MODULE_OF = {name: module for module, names in _SOURCES.items() for name in names}

__all__ = [  # the same names as _SOURCES, written out for type checkers and linters
    "AccessDecision", "AccessPolicy", "AttachmentPolicy", "AttachmentRefused", "attachment_folder",
    "open_attachment", "read_attachment", "DeliveryJournal", "Part", "RunThreads", "deliver_parts",
    "delivery_key", "reply_parts", "split_message", "numbered", "Button", "NoteMessages", "clip_note", "deliver_note",
    "replacing_preview",
    "Channel", "ChannelContext", "ChannelProfile", "ConfigurationError", "DeliveryError", "DeliveryRecord", "EventLog",
    "FunctionSpec", "Handler", "HandlerContext", "Home", "INTAKE_FAILED_REPLY", "IncomingPayload", "Outbox",
    "Job", "OutgoingPayload", "PermanentError", "ProviderSettings", "Settings", "SettingsError", "Sink", "StatusCache",
    "atomic_write", "hookimpl", "now_ms", "safe_name", "split_send_file_tags", "utc_now_iso", "ChannelOptions",
    "audio_note", "is_audio", "with_audio", "divert_log_lines", "ConversationScope",
]


def __getattr__(name: str) -> Any:
    """Imports a public name's module the first time the name is asked for."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'gateway' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
