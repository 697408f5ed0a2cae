"""The outbound side of a `switchyard run` on the postgres backend: one owner per channel profile.

Each configured channel profile is started only while this process holds its lease
(`channel:<type>/<profile id>`, gateway/backends/postgres/leases.py); a process without it stands by, shows the
owner in its status, and tries again when the owner's lease runs out. Losing a lease stops the
channel at once and its deliveries with it; a clean stop releases the leases. The replies of owned
profiles are delivered by PgDelivery, which replaces the file Dispatcher.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextlib import suppress

from gateway.aio import wait_event
from gateway.api import Channel
from gateway.backends.postgres.db import dsn_from_settings
from gateway.backends.postgres.dispatcher import PgDelivery
from gateway.backends.postgres.errors import database_away
from gateway.backends.postgres.leases import Leases, channel_lease
from gateway.backends.runtime import SendLoop, Supervision
from gateway.channelkit.attachments import AttachmentPolicy, extra_file_roots
from gateway.channelkit.backoff import delay as backoff_delay
from gateway.home import Home
from gateway.settings import ChannelProfile, Settings
from gateway.telemetry.events import EventLog

log = logging.getLogger("switchyard.pg.owners")

CHANNEL_STOP_S = 5.0


class PgOutbound:
    """Leases, the channels `supervisor` starts under them, and the delivery of their replies."""

    def __init__(self, supervisor: Supervision, home: Home, settings: Settings, events: EventLog, *,
                 send_loop: Callable[[AttachmentPolicy], SendLoop], holder: str | None = None,
                 dsn: str | None = None):
        self.supervisor = supervisor
        self.settings = settings
        self.events = events
        self.lease_sec = settings.queue.lease_sec
        dsn = dsn if dsn is not None else dsn_from_settings(settings.queue)  # its backend's, when given
        self.leases = Leases(dsn, self.lease_sec, self._lost, holder=holder, on_trouble=self._show_owned)
        types = [profile.type for profile in settings.channels]
        self.delivery = PgDelivery(home, events, settings.queue, dsn, self.leases, send_loop=send_loop,
                                   extra_roots=extra_file_roots(home, settings),
                                   single_profile_types={t for t in types if types.count(t) == 1})
        self._profiles = {channel_lease(p.type, p.id): p for p in settings.channels}
        self._running: dict[str, Channel] = {}  # profile id -> channel started under its lease
        self._changed: dict[str, asyncio.Event] = {p.id: asyncio.Event() for p in settings.channels}
        self._owners: dict[str, str | None] = {}
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def holder(self) -> str:
        return self.leases.holder

    async def start(self) -> list[Channel]:
        """Takes the free leases and starts their channels (the supervisor's running channels, returned); the
        rest stand by in the background."""
        waits = {profile.id: await self._try_own(profile, attempt=1) for profile in self.settings.channels}
        self.delivery.start()
        self._tasks.append(asyncio.create_task(self.leases.run(), name="leases"))
        for profile in self.settings.channels:
            if waits[profile.id] is not None:
                self._tasks.append(asyncio.create_task(self._own(profile, waits[profile.id] or 0.0),
                                                       name=f"owner:{profile.id}"))
        return self.supervisor.channels

    async def stop(self) -> None:
        """Stops the owner loops and releases every lease (after the Gateway stopped the channels)."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        held = list(self.leases.held)
        with suppress(Exception):
            await self.leases.release(held)
        for name in held:
            profile = self._profiles[name]
            self.events.emit("channel.lease_released", channel=profile.type, profile=profile.id,
                                     holder=self.holder)
        await self.leases.close()

    # --- one profile ----------------------------------------------------------------------

    async def _own(self, profile: ChannelProfile, first_wait: float) -> None:
        """Stands by while another process owns the profile; takes it (and starts it) when free."""
        attempt = 2
        changed = self._changed[profile.id]
        stopping = self.supervisor.stopping
        if first_wait > 0:
            await wait_event(stopping, first_wait)
        while not stopping.is_set():
            if profile.id in self._running:
                changed.clear()
                await changed.wait()
                continue
            wait = await self._try_own(profile, attempt)
            if wait is None:
                return  # disabled: a configuration problem
            attempt = 1 if profile.id in self._running else attempt + 1
            if wait > 0:
                await wait_event(stopping, wait)

    async def _try_own(self, profile: ChannelProfile, attempt: int) -> float | None:
        """One try: take the lease and start the channel. Returns the wait before the next try
        (0: none needed, it runs), None when the profile is disabled."""
        name = channel_lease(profile.type, profile.id)
        try:
            owner, left = await self.leases.take(name)
        except Exception as exc:
            said = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            reason = (f"database unreachable: {said}" if database_away(exc)  # else said as what it is
                      else f"cannot take its lease: {type(exc).__name__}: {said}")
            self._show(profile, "standby", reason)
            return backoff_delay(attempt, 0.5, self.lease_sec / 3, jitter=(0.8, 1.2))
        if owner != self.holder:
            if owner != self._owners.get(profile.id):
                log.info("channel %s (%s) stands by: owned by %s", profile.id, profile.type, owner)
                self.events.emit("channel.standby", channel=profile.type, profile=profile.id, owner=owner)
            self._owners[profile.id] = owner
            self._show(profile, "standby", f"owned by {owner}" if owner else "lease free")
            return min(self.lease_sec / 3, left + 0.05)
        self._owners[profile.id] = self.holder
        log.info("channel %s (%s): lease taken by %s", profile.id, profile.type, self.holder)
        self.events.emit("channel.lease_taken", channel=profile.type, profile=profile.id, holder=self.holder)
        try:
            channel = await self.supervisor.start(profile)
        except Exception as exc:  # the lease goes back (another process may do better), then the one policy
            with suppress(Exception):
                await self.leases.release([name])
            return self.supervisor.failed(profile, exc, attempt=attempt)
        if self.supervisor.stopping.is_set() or not self.leases.holds(name):
            await self._stop_channel(channel)  # lost (or stopping) while it started
            return self.lease_sec / 3
        self._running[profile.id] = channel
        self.delivery.add_channel(channel)
        self.supervisor.running(profile, channel, attempt=attempt, reason=self._owned_note())
        return 0.0

    async def _lost(self, name: str, reason: str) -> None:
        """A lease is gone: the channel stops at once (before another process may take it over)."""
        profile = self._profiles.get(name)
        if profile is None:
            return
        channel = self._running.pop(profile.id, None)
        log.warning("channel %s (%s): lease lost (%s); stopping it", profile.id, profile.type, reason)
        self.events.emit("channel.lease_lost", channel=profile.type, profile=profile.id,
                                 holder=self.holder, reason=reason)
        if channel is not None:
            self.delivery.remove_channel(channel)
            with suppress(ValueError):
                self.supervisor.channels.remove(channel)
            await self._stop_channel(channel)
        self._owners.pop(profile.id, None)
        self._show(profile, "standby", f"lease lost: {reason}")
        self._changed[profile.id].set()

    async def _stop_channel(self, channel: Channel) -> None:
        try:
            async with asyncio.timeout(CHANNEL_STOP_S):
                await channel.stop()
        except Exception as exc:
            log.warning("channel %s did not stop cleanly: %s", channel.profile_id, exc)

    def _show_owned(self) -> None:
        """The owned profiles' status: this process owns them, and whether it can renew their leases."""
        for profile in self.settings.channels:
            if profile.id in self._running:
                self._show(profile, "running", self._owned_note())

    def _owned_note(self) -> str:
        trouble = self.leases.last_error
        return f"owner {self.holder}" + (f"; cannot renew its lease, retrying: {trouble}" if trouble else "")

    def _show(self, profile: ChannelProfile, state: str, reason: str) -> None:
        self.supervisor.show(profile, state, reason)
