"""Delivers `queue/outgoing/` through the channel that owns each payload; sent files go to `sent/` (the
replies of the file and memory backends: gateway/runtime/outgoing.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from gateway.aio import finish_or_cancel
from gateway.api import Channel
from gateway.channelkit.attachments import AttachmentPolicy
from gateway.channelkit.backoff import delay as backoff_delay
from gateway.home import Home, remove_old_files, scan_mtimes
from gateway.models import IncomingPayload, OutgoingPayload
from gateway.outbox import conversation_of
from gateway.runtime.sending import Sender
from gateway.settings import QueueSettings
from gateway.spool.deadletters import move_to_failed
from gateway.telemetry.events import EventLog

log = logging.getLogger("switchyard.dispatcher")


class Dispatcher:
    """Sends each outgoing payload once, in order per conversation, retrying failures with backoff
    (the rules: gateway/runtime/sending.py; this class keeps the files).

    A payload whose channel has no running plugin stays in `outgoing/` (one warning per channel
    profile) and is delivered by a later start that has the plugin.

    Attachments are checked again at each delivery attempt and handed to the channel open (see
    gateway/channelkit/attachments.py); a refused one is left out and named in the text.
    """

    def __init__(self, home: Home, channels: list[Channel], events: EventLog, settings: QueueSettings, *,
                 extra_roots: Sequence[str | os.PathLike[str]] = ()):
        self.home = home
        self.events = events
        self.settings = settings
        self.attachments = AttachmentPolicy(home, extra_roots)
        self.sender = Sender(self.attachments, events, settings)
        self._channels = {(c.name, c.profile_id): c for c in channels}
        self._queues: dict[str, _Outgoing] = {}
        self._active: dict[str, asyncio.Task[None]] = {}
        self._known: set[str] = set()
        self._parsed: dict[str, OutgoingPayload] = {}
        self._warned: set[tuple[str, str]] = set()
        self._stopping = False

    def channel_for(self, payload: OutgoingPayload) -> Channel | None:
        """The running channel of this payload's channel and profile (or the only one of its type)."""
        found = self._channels.get((payload.channel, payload.profile))
        if found is None and payload.channelProfileId is None:
            of_type = [c for (name, _), c in self._channels.items() if name == payload.channel]
            found = of_type[0] if len(of_type) == 1 else None
        return found

    def add_channel(self, channel: Channel) -> None:
        """Registers a channel that started late and delivers the replies that waited for it."""
        self._channels[(channel.name, channel.profile_id)] = channel
        self._warned.discard((channel.name, channel.profile_id))
        self.rescan()

    def channel_for_incoming(self, message: IncomingPayload) -> Channel | None:
        """The running channel a message came in through (for its typing indicator)."""
        return self._channels.get((message.channel, message.profile))

    def rescan(self) -> None:
        """Lists `outgoing/` and schedules every payload not yet known, oldest first: by mtime, then by the
        timestamp the outbox stamped it with (never below the one before: the order it wrote them, which one
        tick of the file clock does not tell), then by name. Each file is read once, as `notice` does."""
        if self._stopping:
            return
        found = scan_mtimes(self.home.outgoing, lambda name: name.endswith(".json") and name not in self._known)
        backlog = [(mtime, payload, name) for name, mtime in found if (payload := self._read(name)) is not None]
        for _, payload, name in sorted(backlog, key=lambda item: (item[0], item[1].timestamp, item[2])):
            self.schedule(name, payload)

    def notice(self, name: str) -> None:
        """Schedules one payload file that appeared in `outgoing/`."""
        if self._stopping or name in self._known or not name.endswith(".json"):
            return
        payload = self._read(name)
        if payload is not None:
            self.schedule(name, payload)

    def _read(self, name: str) -> OutgoingPayload | None:
        """The payload of a file of `outgoing/`; None when it is gone, or invalid (then moved to failed/)."""
        path = self.home.outgoing / name
        try:
            return OutgoingPayload.model_validate(json.loads(path.read_bytes()))
        except FileNotFoundError:
            return None
        except (ValueError, ValidationError) as exc:
            reason = self.events.redact(f"invalid outgoing payload: {exc}")
            self.dead_letter(name, reason, attempts=0)
            self.sender.undeliverable(name, reason, 0)
            return None

    def schedule(self, name: str, payload: OutgoingPayload) -> None:
        """Schedules a payload already parsed (by `notice`, or handed over by the outbox that wrote it)."""
        if self._stopping or name in self._known:
            return
        channel = self.channel_for(payload)
        if channel is None:
            self._warn_undeliverable(name, payload)
            return
        self._known.add(name)
        self._parsed[name] = payload
        key = f"{payload.channel}/{payload.profile}/{conversation_of(payload)}"
        if key not in self._queues:
            self._queues[key] = _Outgoing(self)
        self._queues[key].names.append(name)
        if key not in self._active:
            self._active[key] = asyncio.create_task(self._drain(key), name=f"deliver:{key}")

    def _warn_undeliverable(self, name: str, payload: OutgoingPayload) -> None:
        owner = (payload.channel, payload.profile)
        if owner in self._warned:
            return
        self._warned.add(owner)
        log.warning("no running channel for %s/%s: %s and later replies for it stay in outgoing/",
                    *owner, name)
        self.events.emit("outgoing.undeliverable", channel=payload.channel, profile=payload.profile,
                         file=name, reason="no running channel plugin for this channel profile")

    async def _drain(self, key: str) -> None:
        outgoing = self._queues[key]
        try:
            await self.sender.drain(outgoing, lambda: self._stopping)
        finally:
            self._active.pop(key, None)
            if not outgoing.names:
                self._queues.pop(key, None)

    async def _pause(self, name: str, reason: str, failures: int) -> None:
        """Reports a file-system refusal and waits out a backoff before the next try."""
        delay = backoff_delay(failures, self.settings.backoff_initial_ms, self.settings.backoff_max_ms) / 1000
        if failures == 1:
            log.error("%s (retrying)", reason)
        self.events.emit("queue.error", file=name, reason=reason, retry_ms=int(delay * 1000), failures=failures)
        await asyncio.sleep(delay)

    def peek(self, name: str) -> OutgoingPayload | None:
        """A scheduled payload, as parsed when noticed (else read again); None when it is gone or unreadable."""
        parsed = self._parsed.get(name)
        if parsed is not None:
            return parsed
        try:
            return OutgoingPayload.model_validate(json.loads((self.home.outgoing / name).read_bytes()))
        except (OSError, ValueError, ValidationError):
            return None

    def take(self, name: str) -> OutgoingPayload | None:
        """The payload of a reply come to the head of its conversation: as parsed when it was noticed (if the
        file is still there), else read again; None, and the name forgotten, when its file is gone."""
        path = self.home.outgoing / name
        parsed = self._parsed.pop(name, None)
        if parsed is not None and os.path.exists(path):
            return parsed
        try:
            return OutgoingPayload.model_validate(json.loads(path.read_bytes()))
        except FileNotFoundError:
            self._known.discard(name)
            return None

    async def refused(self, name: str, exc: Exception, failures: int) -> None:
        """Reports a file system that refused the delivery of `name` (e.g. failed/ not writable) and waits out
        a backoff before the next try."""
        await self._pause(name, f"cannot deliver {name}: {type(exc).__name__}: {exc}", failures)

    async def delivered(self, name: str) -> None:
        """Moves a delivered file to sent/, waiting out a file system that refuses it."""
        failures = 0
        while True:
            try:
                self._move_to_sent(self.home.outgoing / name)
                return
            except FileNotFoundError:
                return  # removed meanwhile: it was delivered, never send it twice
            except OSError as exc:
                failures += 1
                await self._pause(name, f"cannot move {name} to sent/: {exc}", failures)

    def _move_to_sent(self, path: Path) -> None:
        target = self.home.sent / path.name
        if target.exists():
            target = self.home.sent / f"{time.time_ns()}-{path.name}"
        os.rename(path, target)
        self._known.discard(path.name)

    def dead_letter(self, name: str, reason: str, attempts: int, payload: OutgoingPayload | None = None) -> None:
        """Moves an undeliverable file to failed/ with its reason."""
        path = self.home.outgoing / name
        conversation = (payload.conversationId or payload.senderId) if payload is not None else None
        with contextlib.suppress(FileNotFoundError):  # gone meanwhile: nothing left to keep
            move_to_failed(self.home, path, fsync=self.settings.fsync, reason=reason, attempts=attempts,
                           source="outgoing", conversation=conversation)
        self._known.discard(path.name)
        self._parsed.pop(path.name, None)

    def prune_sent(self) -> int:
        """Deletes delivered payloads older than `sent_retention_days`; returns how many."""
        return len(remove_old_files(self.home.sent, lambda name: True, self.settings.sent_retention_days * 86400))

    async def stop(self, grace_s: float) -> None:
        """Lets deliveries in progress finish for `grace_s`; undelivered files stay in outgoing/."""
        self._stopping = True
        await finish_or_cancel(list(self._active.values()), grace_s)



class _Outgoing:
    """One conversation's replies in outgoing/, in the order they were noticed (a sending.Conversation):
    a retried head waits in place, its attempts counted here."""

    def __init__(self, dispatcher: Dispatcher):
        self.dispatcher = dispatcher
        self.names: deque[str] = deque()
        self.attempts = 0  # of the head
        self.failures = 0  # of the file system, for the head

    async def head(self) -> _FileHead | None:
        dispatcher = self.dispatcher
        while self.names:
            name = self.names[0]
            payload = dispatcher.take(name)
            if payload is None:
                self.left()
                continue
            channel = dispatcher.channel_for(payload)
            assert channel is not None
            return _FileHead(self, name, payload, channel, self.attempts)
        return None

    async def wait(self, delay_s: float) -> bool:
        await asyncio.sleep(delay_s)
        return True

    async def failed(self, exc: Exception) -> bool:
        """E.g. failed/ not writable: the file stays, tried again after a pause."""
        self.failures += 1
        await self.dispatcher.refused(self.names[0] if self.names else "a reply", exc, self.failures)
        return True

    def left(self) -> None:
        """The head was sent, is dead or vanished: the next reply becomes the head."""
        self.names.popleft()
        self.attempts = self.failures = 0


@dataclass
class _FileHead:
    """A reply file at the head of its conversation (a sending.Head)."""

    outgoing: _Outgoing
    name: str
    payload: OutgoingPayload
    channel: Channel
    attempts: int
    journal: None = None  # each channel keeps its own DeliveryJournal in the home

    def counts(self, exc: Exception) -> bool:
        return True

    async def sent(self) -> None:
        await self.outgoing.dispatcher.delivered(self.name)
        self.outgoing.left()

    async def superseded(self) -> bool:
        key = self.payload.progress_key
        later = (self.outgoing.dispatcher.peek(name) for name in list(self.outgoing.names)[1:])
        return key is not None and any(p is not None and key in (p.progress_key, p.stream_key) for p in later)

    async def retry(self, attempts: int, error: str, delay_s: float) -> None:
        self.outgoing.attempts = attempts

    async def dead(self, reason: str, attempts: int) -> None:
        self.outgoing.dispatcher.dead_letter(self.name, reason, attempts, self.payload)
        self.outgoing.left()
