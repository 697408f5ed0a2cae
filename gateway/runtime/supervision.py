"""Channel supervision, one policy for both backends: starting a profile's channel, telling a configuration
problem (the profile is disabled) from an outage (retried in the background with jittered backoff, 1 s
doubling to 5 min, as docs/channels.md says), and each profile's state for `switchyard status`.

It is given callables, not the Gateway: `start` builds and starts one profile's channel, `on_change` writes
the status, `spawn` runs a background task the gateway cancels when it stops.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from gateway.aio import wait_event
from gateway.channelkit.backoff import RETRY_INITIAL_S as RETRY_INITIAL_S
from gateway.channelkit.backoff import RETRY_MAX_S as RETRY_MAX_S
from gateway.channelkit.backoff import delay as backoff_delay
from gateway.seams import Channel, PermanentError
from gateway.settings import ChannelProfile
from gateway.telemetry.events import EventLog

log = logging.getLogger("switchyard")

DISABLING = (PermanentError, ValueError, TypeError, KeyError)  # a configuration problem: retrying cannot help


class ChannelSupervisor:
    """The running channels of one gateway and the state of every profile (`status`)."""

    def __init__(self, start: Callable[[ChannelProfile], Awaitable[Channel]], events: EventLog, *,
                 on_change: Callable[[], None], spawn: Callable[[Coroutine[Any, Any, None], str], None],
                 retry_s: tuple[float, float] = (RETRY_INITIAL_S, RETRY_MAX_S)):
        self._start = start
        self.events = events
        self._on_change = on_change
        self._spawn = spawn
        self.retry_s = retry_s
        self.channels: list[Channel] = []
        self.status: dict[str, dict[str, Any]] = {}
        self._noted: dict[str, str] = {}  # a channel's note made in start(), until it is counted running
        self.stopping = asyncio.Event()  # set first thing when the gateway stops; every retry loop checks it

    async def start(self, profile: ChannelProfile) -> Channel:
        """Builds and starts the profile's channel (not yet counted as running); raises why it cannot. A note
        the channel made while starting (`ChannelContext.note`, e.g. the address it listens on) is kept
        for `running`, which would otherwise replace it."""
        before = self.status.get(profile.id)
        channel = await self._start(profile)
        after = self.status.get(profile.id)
        if after is not before and after is not None and after["state"] == "running" and after.get("reason"):
            self._noted[profile.id] = str(after["reason"])
        return channel

    def running(self, profile: ChannelProfile, channel: Channel, *, attempt: int, reason: str | None = None) -> None:
        """Counts a started channel as running, beside its own note from `start` or else `reason` (the channel's
        word wins: the dashboard links a web chat's note, its address, as it is); after a failed attempt, says
        so with `channel.started`."""
        self.channels.append(channel)
        self.show(profile, "running", self._noted.pop(profile.id, None) or reason)
        if attempt > 1:
            self.events.emit("channel.started", channel=profile.type, profile=profile.id, attempt=attempt)

    def failed(self, profile: ChannelProfile, exc: BaseException, *, attempt: int) -> float | None:
        """Records a failed start (log, `channel.retrying` or `channel.disabled`, the state); returns the wait
        before the next attempt, None when the profile is disabled."""
        reason = self.events.redact(str(exc) or type(exc).__name__)
        retrying = not isinstance(exc, DISABLING)
        state = "retrying" if retrying else "disabled"
        log.error("channel %s (%s) is %s: %s", profile.id, profile.type, state, reason)
        self.events.emit(f"channel.{state}", channel=profile.type, profile=profile.id, reason=reason, attempt=attempt)
        self.show(profile, state, reason)
        if not retrying:
            return None
        initial_s, max_s = self.retry_s
        return backoff_delay(attempt, initial_s, max_s, jitter=(0.5, 1.0))

    def show(self, profile: ChannelProfile, state: str, reason: str | None = None) -> None:
        """Sets a profile's state (with `reason` beside it) and writes the status when it changed."""
        entry: dict[str, Any] = {"type": profile.type, "state": state, **({"reason": reason} if reason else {})}
        if self.status.get(profile.id) != entry:
            self.status[profile.id] = entry
            self._on_change()

    async def start_each(self, profiles: list[ChannelProfile],
                         on_started: Callable[[Channel], None] = lambda channel: None) -> list[Channel]:
        """Starts every profile; one that fails with an outage is retried in the background until it starts
        (then handed to `on_started`), is disabled, or the gateway stops. Returns the running channels."""
        for profile in profiles:
            try:
                channel = await self.start(profile)
            except Exception as exc:
                pause = self.failed(profile, exc, attempt=1)
                if pause is not None:
                    self._spawn(self._retry(profile, pause, on_started), f"channel-retry:{profile.id}")
                continue
            self.running(profile, channel, attempt=1)
        return self.channels

    async def _retry(self, profile: ChannelProfile, pause: float, on_started: Callable[[Channel], None]) -> None:
        for attempt in itertools.count(2):
            if await wait_event(self.stopping, pause):
                return
            try:
                channel = await self.start(profile)
            except Exception as exc:
                if self.stopping.is_set():  # a plugin may turn our cancellation into its own error
                    return
                next_pause = self.failed(profile, exc, attempt=attempt)
                if next_pause is None:
                    return
                pause = next_pause
                continue
            if self.stopping.is_set():  # started while stopping: the stop path no longer looks at it
                await channel.stop()
                return
            self.running(profile, channel, attempt=attempt)
            on_started(channel)
            return
