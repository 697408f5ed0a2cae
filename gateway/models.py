"""The queue payloads of spec 002: incoming and outgoing messages (camelCase, extra keys kept)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator
from pydantic_core import PydanticSerializationError

from gateway.storable import made_safe, safe_json, unstorable
from gateway.telemetry.events import now_ms
from gateway.telemetry.tracing import current_carrier

INVALID_APOLOGY = "Sorry, I could not take in your message: {reason}"
_FILE_TAG = re.compile(r"\[file:\s*([^\]]+)\]")
_SEND_FILE_TAG = re.compile(r"\[send_file:\s*([^\]]+)\]")


class _Payload(BaseModel):
    # defer_build: a model is built when it first validates, not on import (`switchyard status` uses none)
    model_config = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)

    def to_json(self) -> bytes:
        """Serialises the payload as UTF-8 JSON, omitting optional keys that are unset. A lone surrogate
        (a channel's text decoded from JSON's `\\ud800`) is written as that escape: the file keeps it, and
        its reader refuses it as invalid input (gateway.storable), as it does a NUL."""
        try:
            return self.model_dump_json(exclude_none=True).encode()
        except PydanticSerializationError:
            return json.dumps(self.model_dump(mode="json", exclude_none=True), separators=(",", ":")).encode()


class Job(BaseModel):
    """A job a channel authored (spec 003): carried in a payload's `job` key, it makes the message a job
    that starts its profile's workflow directly (no selector, no commands) with the text and the fields
    below as input; the run keeps them in state.json and the final result carries them back.

    Extra keys (a channel's own bookkeeping, e.g. `state`, `created_at`, `retries`) are kept.
    """

    model_config = ConfigDict(extra="allow", defer_build=True)  # built on first use, as the payloads

    job_id: str | None = Field(default=None, max_length=256)
    repo: str | None = None
    branch: str | None = None
    slug: str | None = None
    timestamp: str | None = None
    inbox_file: str | None = None
    source_timestamp: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    def input_fields(self) -> dict[str, str]:
        """The fields a job's workflow receives as input next to `text` (those that are set)."""
        named = {"repo": self.repo, "branch": self.branch, "slug": self.slug, "timestamp": self.timestamp,
                 "inbox_file": self.inbox_file}
        return {key: value for key, value in named.items() if value is not None}


class IncomingPayload(_Payload):
    """A message from a person (or a program) waiting in `queue/incoming/`."""

    channel: str = Field(min_length=1, max_length=64)
    channelProfileId: str | None = Field(default=None, max_length=128)
    sender: str = Field(default="", max_length=512)
    senderId: str = Field(default="", max_length=256)
    message: str
    timestamp: int = Field(ge=0)
    messageId: str = Field(min_length=1, max_length=256)
    conversationId: str | None = Field(default=None, max_length=256)
    files: list[str] = Field(default_factory=list)
    workflowRunId: str | None = Field(default=None, max_length=128)
    workflowStepId: str | None = Field(default=None, max_length=128)
    job: Job | None = None
    """Set by a channel that authors jobs: the message is a job, not chat (see `Job`)."""
    editOf: str | None = Field(default=None, max_length=256)
    """Set by a channel when the message is an edit: the messageId of the message edited (`senderId` is who made
    the edit, as the platform reports it). Folded into that message while it waits, when it is its sender's
    (gateway.channelkit.edits, gateway.stores.EditFolding); another sender's is queued without editOf, as a message
    of its
    own; an edit of a message already taken is queued as its own message, shown "(edited) …"."""
    invokeFunction: str | None = Field(default=None, max_length=128)
    """Set by a channel whose messages are requests for one function (e.g. a probe): the built-in
    `rules` selector invokes it when the orchestrator offers it; other selectors see it in the request."""

    @field_validator("channelProfileId", "conversationId", "workflowRunId", "workflowStepId", "editOf")
    @classmethod
    def _empty_is_none(cls, value: str | None) -> str | None:
        return value or None

    @property
    def conversation(self) -> str:
        """The conversation this message belongs to: its conversationId, else its sender."""
        return self.conversationId or self.senderId or self.sender

    @property
    def profile(self) -> str:
        """The channel profile id, defaulting to the channel name."""
        return self.channelProfileId or self.channel

    @property
    def button(self) -> str | None:
        """The id of the button this message taps (`button`, set by a channel when a user taps one of a
        reply's `buttons`; `message` then holds the button's label), else None."""
        tapped = (self.model_extra or {}).get("button")
        return tapped if isinstance(tapped, str) and tapped else None

    def file_paths(self) -> list[str]:
        """Every attachment path, from `files` and from `[file: …]` tags in the text."""
        tagged = [m.strip() for m in _FILE_TAG.findall(self.message)]
        return list(dict.fromkeys([*self.files, *tagged]))


@dataclass(frozen=True)
class Button:
    """A one-tap answer under a reply: the id a tap sends back (`IncomingPayload.button`) and its label."""

    id: str
    label: str


class OutgoingPayload(_Payload):
    """A reply waiting in `queue/outgoing/` for its channel plugin.

    Extra keys are kept. One that channels read is `progressKey`: the payload is a progress note
    (e.g. "working: using Read: src/app.py") and every note with the same key in the same
    conversation reports on the same work, so a channel that can edit messages shows them as one
    message updated in place (see `Channel.edits_progress`). A draft (`draft: true`) is such a note
    holding an answer as it is written; the final answer names its key as `streamKey` (orchestrator/
    streaming.py).
    """

    channel: str
    channelProfileId: str | None = None
    sender: str = ""
    senderId: str | None = None
    message: str
    originalMessage: str = ""
    timestamp: int
    messageId: str
    agent: str = ""
    conversationId: str | None = None
    files: list[str] = Field(default_factory=list)
    workflowRunId: str | None = None
    workflowStepId: str | None = None
    job: Job | None = None
    """The job a reply concerns (a copy of the incoming `job`, or a finished run's spec-003 job fields)."""
    _opened: dict[str, BinaryIO] = PrivateAttr(default_factory=dict)  # files the dispatcher opened for upload

    def to_json(self) -> bytes:
        """UTF-8 JSON as for an incoming payload, with text no store can hold (a NUL, a lone surrogate)
        replaced by U+FFFD (gateway.storable): a reply is never lost, nor its queue stuck, for one character."""
        try:
            data = self.model_dump_json(exclude_none=True).encode()
        except PydanticSerializationError:  # a lone surrogate cannot be encoded: dumped again, made safe
            data = b""
        if data and b"\\u0000" not in data:
            return data
        return safe_json(self.model_dump(mode="json", exclude_none=True))

    def holding(self, opened: dict[str, BinaryIO]) -> OutgoingPayload:
        """A copy of this payload holding the files opened and checked for its upload (path → open file)."""
        copy: OutgoingPayload = self.model_copy()
        copy._opened = opened
        return copy

    def opened_file(self, path: str) -> BinaryIO | None:
        """The open file held for the upload of `path` (see `holding`); None when none was opened for it."""
        return self._opened.get(path)

    def close_files(self) -> None:
        """Closes the files held for this payload's upload, and holds none after."""
        for handle in self._opened.values():
            handle.close()
        self._opened = {}

    @classmethod
    def reply_to(
        cls, incoming: IncomingPayload, text: str, *, agent: str, timestamp: int, quoted: Sequence[str] = (),
        **extra: Any,
    ) -> OutgoingPayload:
        """Builds the reply to `incoming`, moving `[send_file: …]` tags into `files`; a tag the user
        wrote (in `incoming`'s text or in `quoted`, e.g. a run's input) stays text and sends nothing."""
        body, files = split_send_file_tags(text, quoted="\n".join([incoming.message, *quoted]))
        fields: dict[str, Any] = {
            "channel": incoming.channel,
            "channelProfileId": incoming.channelProfileId,
            "sender": incoming.sender,
            "senderId": incoming.senderId or None,
            "message": body,
            "originalMessage": incoming.message,
            "timestamp": timestamp,
            "messageId": incoming.messageId,
            "agent": agent,
            "conversationId": incoming.conversationId,
            "files": files,
            "workflowRunId": incoming.workflowRunId,
            "workflowStepId": incoming.workflowStepId,
        }
        fields.update(current_carrier())  # the trace its delivery joins (telemetry on)
        fields.update({k: v for k, v in extra.items() if v is not None})
        return cls(**fields)

    @property
    def profile(self) -> str:
        """The channel profile id, defaulting to the channel name."""
        return self.channelProfileId or self.channel

    @property
    def progress_key(self) -> str | None:
        """The `progressKey` of a progress note (None for an ordinary reply)."""
        key = (self.model_extra or {}).get("progressKey")
        return key if isinstance(key, str) and key else None

    @property
    def draft(self) -> bool:
        """Whether this is a draft of a streamed answer (`draft: true`, with the stream's `progressKey`): a
        preview that only a channel which edits messages shows, and only the newest one of its key."""
        return (self.model_extra or {}).get("draft") is True and self.progress_key is not None

    @property
    def stream_key(self) -> str | None:
        """The `streamKey` of a final answer: the stream whose preview (drafts with that `progressKey`) a
        channel edits into this reply's first part (None: an ordinary reply)."""
        key = (self.model_extra or {}).get("streamKey")
        return key if isinstance(key, str) and key else None

    @property
    def buttons(self) -> list[Button]:
        """The one-tap answers shown under this reply (`buttons`: `[{"id", "label"}]`, ids of at most 64
        bytes); a channel without buttons shows them as a numbered list to answer by number."""
        raw = (self.model_extra or {}).get("buttons")
        if not isinstance(raw, list):
            return []
        return [Button(id=str(item["id"]), label=str(item.get("label") or item["id"]))
                for item in raw if isinstance(item, dict) and item.get("id")]


class UnstorableText(ValueError):
    """A payload holding text no store can hold (gateway.storable): invalid input on every backend. Its
    sender is still told why (`apology`) when the payload, that text made safe, addresses a conversation
    none of that text is part of; else the reason says no apology was sent."""

    def __init__(self, problem: str, raw: dict[str, Any]):
        self.safe = _addressable(raw)
        super().__init__(problem if self.safe else f"{problem}; no apology sent: no conversation to address")

    def apology(self) -> OutgoingPayload | None:
        """The reply telling the sender why the message was refused; None when it cannot be addressed."""
        if self.safe is None:
            return None
        text = INVALID_APOLOGY.format(reason=self)  # quoted: a tag in the reason is text, never a file sent
        return OutgoingPayload.reply_to(self.safe, text, agent="switchyard", timestamp=now_ms(), quoted=[text])


def _addressable(raw: dict[str, Any]) -> IncomingPayload | None:
    """The payload with unstorable text made safe, when it is valid and its address (channel, profile and
    the field naming its conversation) held none; else None."""
    try:
        safe = IncomingPayload.model_validate(made_safe(raw))
    except Exception:
        return None
    source = "conversationId" if safe.conversationId else "senderId" if safe.senderId else "sender"
    if any(unstorable(raw.get(name)) for name in ("channel", "channelProfileId", source)):
        return None
    return safe


def split_send_file_tags(text: str, *, quoted: str = "") -> tuple[str, list[str]]:
    """Removes `[send_file: /path]` tags from an answer and returns (text, paths).

    A tag naming a path that a `[send_file: …]` tag of `quoted` (what the user wrote) names too is
    the user's own text repeated (an echo): it stays in the text as written and is not listed.
    """
    typed = {m.strip() for m in _SEND_FILE_TAG.findall(quoted)} if "[send_file:" in quoted else set()
    paths: list[str] = []

    def take(match: re.Match[str]) -> str:
        path = match.group(1).strip()
        if path in typed:
            return match.group(0)
        paths.append(path)
        return ""

    body = _SEND_FILE_TAG.sub(take, text).strip() if "[send_file:" in text else text.strip()
    return body, paths
