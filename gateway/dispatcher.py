"""Delivers `queue/outgoing/` through the channel that owns each payload; sent files go to `sent/`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from gateway.api import Channel, DeliveryError, PermanentError
from gateway.attachments import AttachmentPolicy
from gateway.backoff import delay as backoff_delay
from gateway.events import EventLog
from gateway.home import Home, remove_old_files, scan_mtimes
from gateway.models import IncomingPayload, OutgoingPayload
from gateway.queue import move_to_failed
from gateway.settings import QueueSettings
from gateway.uploads import send_with_files

log = logging.getLogger("switchyard.dispatcher")

MAX_PARALLEL_DELIVERIES = 16


class Dispatcher:
    """Sends each outgoing payload once, in order per conversation, retrying failures with backoff.

    A payload whose channel has no running plugin stays in `outgoing/` (one warning per channel
    profile) and is delivered by a later start that has the plugin.

    Attachments are checked again at each delivery attempt and handed to the channel open (see
    gateway/attachments.py); a refused one is left out and named in the text.
    """

    def __init__(self, home: Home, channels: list[Channel], events: EventLog, settings: QueueSettings, *,
                 extra_roots: Sequence[str | os.PathLike[str]] = ()):
        self.home = home
        self.events = events
        self.settings = settings
        self.attachments = AttachmentPolicy(home, extra_roots)
        self._channels = {(c.name, c.profile_id): c for c in channels}
        self._queues: dict[str, deque[str]] = {}
        self._active: dict[str, asyncio.Task[None]] = {}
        self._known: set[str] = set()
        self._parsed: dict[str, OutgoingPayload] = {}
        self._warned: set[tuple[str, str]] = set()
        self._slots = asyncio.Semaphore(MAX_PARALLEL_DELIVERIES)
        self._stopping = False
        self.sent = 0

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
        """Lists `outgoing/` and schedules every payload not yet known, oldest first."""
        found = scan_mtimes(self.home.outgoing, lambda name: name.endswith(".json") and name not in self._known)
        for name, _ in sorted(found, key=lambda item: (item[1], item[0])):
            self.notice(name)

    def notice(self, name: str) -> None:
        """Schedules one payload file that appeared in `outgoing/`."""
        if self._stopping or name in self._known or not name.endswith(".json"):
            return
        path = self.home.outgoing / name
        try:
            payload = OutgoingPayload.model_validate(json.loads(path.read_bytes()))
        except FileNotFoundError:
            return
        except (ValueError, ValidationError) as exc:
            self._quarantine(path, f"invalid outgoing payload: {exc}", attempts=0)
            return
        self.schedule(name, payload)

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
        key = f"{payload.channel}/{payload.profile}/{payload.conversationId or payload.senderId or ''}"
        self._queues.setdefault(key, deque()).append(name)
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
        queue = self._queues[key]
        try:
            failures = 0
            while queue and not self._stopping:
                try:
                    async with self._slots:
                        await self._deliver(queue[0])
                except Exception as exc:  # e.g. failed/ not writable: keep the file, try again later
                    failures += 1
                    await self._pause(queue[0], f"cannot deliver {queue[0]}: {type(exc).__name__}: {exc}", failures)
                    continue
                failures = 0
                queue.popleft()
        finally:
            self._active.pop(key, None)
            if not queue:
                self._queues.pop(key, None)

    async def _deliver(self, name: str) -> None:
        path = self.home.outgoing / name
        attempts = 0
        while not self._stopping:
            try:
                payload = self._payload(name, path)
            except FileNotFoundError:
                self._known.discard(name)
                return
            channel = self.channel_for(payload)
            assert channel is not None
            started = time.perf_counter()
            try:
                record = await (send_with_files(channel, payload, self.attachments, self.events) if payload.files
                                  else channel.send(payload))
            except asyncio.CancelledError:
                raise
            except PermanentError as exc:  # the platform refused it for good (blocked, gone, not a member)
                self._quarantine(path, f"the platform refused it: {exc}", attempts + 1, payload)
                return
            except Exception as exc:
                attempts += 1
                if attempts >= self.settings.max_attempts:
                    self._quarantine(path, f"delivery failed {attempts} time(s): {exc}", attempts, payload)
                    return
                delay = _retry_delay(exc, attempts, self.settings)
                self.events.emit("outgoing.retry", file=name, channel=payload.channel, profile=payload.profile,
                                 conversation=payload.conversationId, reason=str(exc),
                                 attempt=attempts, backoff_ms=int(delay * 1000),
                                 rate_limited=isinstance(exc, DeliveryError) and exc.retry_after is not None)
                await asyncio.sleep(delay)
                continue
            failures = 0
            while True:
                try:
                    self._move_to_sent(path)
                    break
                except FileNotFoundError:
                    break  # removed meanwhile: it was delivered, never send it twice
                except OSError as exc:
                    failures += 1
                    await self._pause(name, f"cannot move {name} to sent/: {exc}", failures)
            self.sent += 1
            self.events.emit("outgoing.sent", file=name, channel=payload.channel, profile=payload.profile,
                             conversation=payload.conversationId, messageId=payload.messageId,
                             platform_ids=record.platform_ids if record else None,
                             duration_ms=round((time.perf_counter() - started) * 1000, 2))
            return


    async def _pause(self, name: str, reason: str, failures: int) -> None:
        """Reports a file-system refusal and waits out a backoff before the next try."""
        delay = backoff_delay(failures, self.settings.backoff_initial_ms, self.settings.backoff_max_ms) / 1000
        if failures == 1:
            log.error("%s (retrying)", reason)
        self.events.emit("queue.error", file=name, reason=reason, retry_ms=int(delay * 1000), failures=failures)
        await asyncio.sleep(delay)

    def _payload(self, name: str, path: Path) -> OutgoingPayload:
        """The payload parsed when it was noticed (if the file is still there), else read again."""
        parsed = self._parsed.pop(name, None)
        if parsed is not None and os.path.exists(path):
            return parsed
        return OutgoingPayload.model_validate(json.loads(path.read_bytes()))

    def _move_to_sent(self, path: Path) -> None:
        target = self.home.sent / path.name
        if target.exists():
            target = self.home.sent / f"{time.time_ns()}-{path.name}"
        os.rename(path, target)
        self._known.discard(path.name)

    def _quarantine(self, path: Path, reason: str, attempts: int, payload: OutgoingPayload | None = None) -> None:
        conversation = (payload.conversationId or payload.senderId) if payload is not None else None
        with contextlib.suppress(FileNotFoundError):  # gone meanwhile: nothing left to keep
            move_to_failed(self.home, path, fsync=self.settings.fsync, reason=reason, attempts=attempts,
                           source="outgoing", conversation=conversation)
        self._known.discard(path.name)
        self._parsed.pop(path.name, None)
        log.error("undeliverable reply %s moved to failed/: %s", path.name, reason)
        self.events.emit("outgoing.failed", file=path.name, reason=reason, attempts=attempts)

    def prune_sent(self) -> int:
        """Deletes delivered payloads older than `sent_retention_days`; returns how many."""
        return len(remove_old_files(self.home.sent, lambda name: True, self.settings.sent_retention_days * 86400))

    async def stop(self, grace_s: float) -> None:
        """Lets deliveries in progress finish for `grace_s`; undelivered files stay in outgoing/."""
        self._stopping = True
        tasks = list(self._active.values())
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)


def _retry_delay(exc: Exception, attempts: int, settings: QueueSettings) -> float:
    """The platform's retry-after when it gave one, else jittered exponential backoff."""
    if isinstance(exc, DeliveryError) and exc.retry_after is not None:
        return float(exc.retry_after)
    return backoff_delay(attempts, settings.backoff_initial_ms, settings.backoff_max_ms, jitter=(0.8, 1.2)) / 1000
