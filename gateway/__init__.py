"""Switchyard's runtime core, and the public API for channel plugins and the orchestrator."""

from gateway.access import AccessDecision, AccessPolicy
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
)
from gateway.attachments import (
    AttachmentPolicy,
    AttachmentRefused,
    attachment_folder,
    open_attachment,
    read_attachment,
)
from gateway.chunking import split_message
from gateway.delivery import DeliveryJournal, Part, RunThreads, deliver_parts, delivery_key, reply_parts
from gateway.events import EventLog, now_ms, utc_now_iso
from gateway.home import Home, atomic_write, safe_name
from gateway.hookspecs import hookimpl
from gateway.models import IncomingPayload, Job, OutgoingPayload, split_send_file_tags
from gateway.notes import NoteMessages, clip_note, deliver_note
from gateway.settings import ChannelOptions, ChannelProfile, ProviderSettings, Settings, SettingsError

__all__ = [
    "AccessDecision", "AccessPolicy", "AttachmentPolicy", "AttachmentRefused", "attachment_folder",
    "open_attachment", "read_attachment", "DeliveryJournal", "Part", "RunThreads", "deliver_parts",
    "delivery_key", "reply_parts", "split_message", "NoteMessages", "clip_note", "deliver_note",
    "Channel", "ChannelContext", "ChannelProfile", "ConfigurationError", "DeliveryError", "DeliveryRecord", "EventLog",
    "FunctionSpec", "Handler", "HandlerContext", "Home", "INTAKE_FAILED_REPLY", "IncomingPayload", "Outbox",
    "Job", "OutgoingPayload", "PermanentError", "ProviderSettings", "Settings", "SettingsError", "Sink",
    "atomic_write", "hookimpl", "now_ms", "safe_name", "split_send_file_tags", "utc_now_iso", "ChannelOptions",
]
