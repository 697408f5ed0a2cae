"""Alerts: the gateway's own events turned into messages for the operators' conversation (`alerts:`).

The policy, written once for every backend:

* **What**: a dead letter (a message's `job.failed.final`, a reply's `outgoing.failed`, a refused file's
  `message.invalid`), a channel disabled or still retrying after `channel_retrying_min`, a provider whose login
  failed (a final failure whose reason says so), a usage limit reached, the database unreachable for
  `database_unreachable_sec` (`outbox.database_unreachable` until `outbox.database_reconnected`), a workflow run
  failed finally. `send` picks the kinds.
* **Grouped and rate-limited** (as Alertmanager's group_wait / group_interval): the first alert waits
  `group_wait_sec` for others to join it, and messages go out at most once per `group_interval_sec`; what comes
  meanwhile is the next message. A state (a channel down, a limit reached, the database away) is told once
  until it recovers.
* **Stored like any reply**: each message is an outgoing payload written through the outbox, so the delivery
  loop delivers it exactly once, retried and dead-lettered under the usual rules. A write the store refuses (the
  database away) keeps the alerts for the next tick.
* **No loop**: an alert's own payload is recognised by its message id (ALERT_ID_PREFIX, in its outgoing name)
  and by the names written here; its retries, its dead letter and this module's own events never alert.

On PostgreSQL each process alerts about the events it emits itself: a dead letter is emitted once, by the host
that gave it up, so it is told once; an unreachable database is seen, and told, by each host.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.models import OutgoingPayload
from gateway.settings import AlertSettings, ChannelProfile, Settings, SettingsError
from gateway.telemetry.events import EventLog, now_ms

log = logging.getLogger("switchyard.alerts")

ALERT_ID_PREFIX = "switchyard-alert-"
TICK_S = 1.0
LINES_SHOWN = 10  # lines of one message; the rest are counted
LOGIN_FAILED = ("not logged in", "refused the login")  # orchestrator/agents/clis: a preset's login refusal
RECOVERED = ("channel.started", "channel.reconnected", "channel.stopped")


class Writer(Protocol):
    """Where alert messages are stored (gateway.api.Outbox)."""

    def write(self, payload: OutgoingPayload) -> Any: ...


@dataclass(frozen=True)
class Alert:
    """One thing to tell: its kind (a key of `alerts.send`), what it is about (`about`, told once while it
    lasts when `lasting`), and its line in the message."""

    kind: str
    about: str
    line: str
    lasting: bool = False


def alert_for(event: dict[str, Any]) -> Alert | None:
    """The alert an event is worth at once (those that need time to pass are the Alerts' timers), or None."""
    name = event.get("event")
    reason = str(event.get("reason") or event.get("failure_reason") or "no reason given")
    if name == "job.failed.final":
        login = any(marker in reason.lower() for marker in LOGIN_FAILED)
        if event.get("kind") == "message":
            where = f"dead letter {event.get('job_id')} (conversation {event.get('conversation')})"
            fix = f"`switchyard dead show {event.get('job_id')}`"
            if login:
                return Alert("provider_login", f"login:{reason}", f"provider login failed: {reason}; {where}, {fix}")
            return Alert("dead_letter", str(event.get("job_id")), f"{where}: {reason}; {fix}")
        run = f"run {event.get('job_id')} (workflow {event.get('workflow')}, conversation {event.get('conversation')})"
        if login:
            return Alert("provider_login", f"login:{reason}", f"provider login failed: {reason}; {run}")
        return Alert("run_failed", str(event.get("job_id")),
                     f"{run} failed: {reason}; `switchyard runs show {event.get('job_id')}`")
    if name == "outgoing.failed":
        return Alert("dead_letter", str(event.get("file")), f"dead reply {event.get('file')}: {reason}; "
                     f"`switchyard dead show {event.get('file')}`")
    if name == "message.invalid":
        dead = event.get("file") or event.get("job_id")
        return Alert("dead_letter", str(dead), f"invalid payload {dead}: {reason}; `switchyard dead show {dead}`")
    if name == "channel.disabled":
        return Alert("channel", f"channel:{event.get('profile')}",
                     f"channel {event.get('profile')} ({event.get('channel')}) is disabled: {reason}", lasting=True)
    if name == "usage.limit_reached":
        return Alert("usage_limit", f"usage:{event.get('kind')}:{event.get('key')}:{event.get('resets_at')}",
                     f"usage limit reached: {event.get('kind')} {event.get('key')} used {event.get('used')} of "
                     f"{event.get('limit')} {event.get('unit')} per {event.get('window')}; resets "
                     f"{event.get('resets_at')}", lasting=True)
    return None


def is_alert_name(name: object) -> bool:
    """Whether an outgoing payload's name (or message id) is an alert's."""
    return isinstance(name, str) and ALERT_ID_PREFIX in name


class Alerts:
    """Collects alerts from the event log (its observer, on any thread) and writes them, grouped, to the
    operators' conversation (`tick`, from `run`'s task)."""

    def __init__(self, settings: AlertSettings, target: ChannelProfile, outbox: Writer, events: EventLog, *,
                 clock: Callable[[], float] = time.monotonic, host: str | None = None):
        self.settings = settings
        self.target = target
        self._outbox = outbox
        self._events = events
        self._clock = clock
        self._host = host or socket.gethostname()
        self._kinds = frozenset(settings.send)
        self._lock = threading.Lock()
        self._pending: list[Alert] = []
        self._first_at: float | None = None
        self._last_sent: float | None = None
        self._told: set[str] = set()  # the lasting states told and not yet recovered
        self._retrying: dict[str, tuple[float, str]] = {}  # profile -> (since, what it said)
        self._database_down: tuple[float, str] | None = None
        self._written: set[str] = set()
        self._sequence = 0

    @classmethod
    def configured(cls, settings: Settings, outbox: Writer, events: EventLog, *,
                   clock: Callable[[], float] = time.monotonic) -> Alerts | None:
        """The alerts `settings` ask for, observing `events` from now on (None: `alerts:` is not set)."""
        if settings.alerts is None:
            return None
        target = settings.profile(settings.alerts.to.profile)
        if target is None:  # Settings refuses it; a hand-built Settings may not have been checked
            raise SettingsError(f"alerts.to.profile: {settings.alerts.to.profile!r} is not a configured channel")
        alerts = cls(settings.alerts, target, outbox, events, clock=clock)
        events.observe(alerts.observe)
        return alerts

    # --- the observer -----------------------------------------------------------------------

    def observe(self, event: dict[str, Any]) -> None:
        """Takes one event into account; quick, and never writes (the tick does)."""
        name = str(event.get("event"))
        if name.startswith("alert."):
            return
        now = self._clock()
        with self._lock:
            if self._about_an_alert(event):
                return
            self._track(name, event, now)
            alert = alert_for(event)
            if alert is not None:
                self._add(alert, now)

    def _about_an_alert(self, event: dict[str, Any]) -> bool:
        name = event.get("file")
        return is_alert_name(name) or name in self._written

    def _track(self, name: str, event: dict[str, Any], now: float) -> None:
        """Follows the states an alert waits on: a channel retrying, the database away."""
        profile = str(event.get("profile"))
        if name in ("channel.retrying", "channel.reconnecting"):
            self._retrying.setdefault(profile, (now, str(event.get("reason") or name)))
        elif name in RECOVERED or name == "channel.disabled":
            self._retrying.pop(profile, None)
            if name in RECOVERED:
                self._told.discard(f"channel:{profile}")
        elif name == "outbox.database_unreachable":
            if self._database_down is None:
                self._database_down = (now, str(event.get("reason") or "unreachable"))
        elif name == "outbox.database_reconnected" and self._database_down is not None:
            since, _ = self._database_down
            self._database_down = None
            if "database" in self._told:
                self._told.discard("database")
                self._add(Alert("database", "database:back",
                                f"the database is reachable again (after {now - since:.0f} s)"), now)

    def _add(self, alert: Alert, now: float) -> None:
        if alert.kind not in self._kinds or (alert.lasting and alert.about in self._told):
            return
        if alert.lasting:
            self._told.add(alert.about)
        if not self._pending:
            self._first_at = now
        self._pending.append(alert)

    # --- the tick ---------------------------------------------------------------------------

    def tick(self) -> int:
        """Adds the alerts time made due, then writes the pending ones as one message when the group has
        waited and the interval allows; returns how many alerts the message carried (0: none written)."""
        now = self._clock()
        with self._lock:
            self._timers(now)
            if not self._pending or self._first_at is None:
                return 0
            if now - self._first_at < self.settings.group_wait_sec:
                return 0
            if self._last_sent is not None and now - self._last_sent < self.settings.group_interval_sec:
                return 0
            alerts = list(self._pending)
        if not self._write(alerts):
            return 0
        with self._lock:
            del self._pending[:len(alerts)]
            self._first_at = now if self._pending else None
            self._last_sent = now
        return len(alerts)

    def _timers(self, now: float) -> None:
        limit_s = self.settings.channel_retrying_min * 60
        for profile, (since, reason) in list(self._retrying.items()):
            if now - since >= limit_s:
                self._add(Alert("channel", f"channel:{profile}",
                                f"channel {profile} has been retrying for {(now - since) / 60:.0f} min: {reason}",
                                lasting=True), now)
        if self._database_down is not None:
            since, reason = self._database_down
            if now - since >= self.settings.database_unreachable_sec:
                self._add(Alert("database", "database", f"the database has been unreachable for "
                                f"{now - since:.0f} s: {reason}", lasting=True), now)

    def _write(self, alerts: list[Alert]) -> bool:
        """Stores one message for `alerts`; a refusal is logged, and the alerts wait for the next tick."""
        self._sequence += 1
        payload = OutgoingPayload(
            channel=self.target.type, channelProfileId=self.target.id, sender="switchyard", agent="switchyard",
            message=self.text(alerts), timestamp=now_ms(), conversationId=self.settings.to.conversationId,
            messageId=f"{ALERT_ID_PREFIX}{now_ms()}-{self._sequence}")
        try:
            name = self._outbox.write(payload)
        except Exception as exc:  # the store refused it (the database away): kept, tried again
            log.warning("alerts: cannot store the alert message yet, retrying: %s", exc)
            return False
        written = getattr(name, "name", str(name))
        self._written.add(written)
        self._events.emit("alert.sent", file=written, profile=self.target.id, count=len(alerts),
                          kinds=sorted({alert.kind for alert in alerts}))
        return True

    def text(self, alerts: list[Alert]) -> str:
        """The message: a headline counting each kind, one line per alert (the first LINES_SHOWN)."""
        counts: dict[str, int] = {}
        for alert in alerts:
            counts[alert.kind] = counts.get(alert.kind, 0) + 1
        headline = ", ".join(f"{count} {_plural(kind, count)}" for kind, count in counts.items())
        lines = [f"Switchyard alert from {self._host}: {headline}"]
        lines += [f"- {alert.line}" for alert in alerts[:LINES_SHOWN]]
        if len(alerts) > LINES_SHOWN:
            lines.append(f"- and {len(alerts) - LINES_SHOWN} more (`switchyard dead list`, `switchyard status`)")
        return "\n".join(lines)

    def waiting(self) -> bool:
        """Whether a tick has anything to do: alerts pending, or a state an alert waits on."""
        with self._lock:
            return bool(self._pending or self._retrying or self._database_down)

    async def run(self) -> None:
        """Ticks every TICK_S until cancelled (on a worker thread: the outbox's write blocks); then stores what
        is still pending (delivered at the next start when the delivery loop has stopped)."""
        try:
            while True:
                await asyncio.sleep(TICK_S)
                if self.waiting():
                    await asyncio.to_thread(self.tick)
        finally:
            with self._lock:
                self._first_at, self._last_sent = -float("inf"), None
            with suppress(Exception):
                self.tick()


_NAMES = {"dead_letter": ("dead letter", "dead letters"), "channel": ("channel problem", "channel problems"),
          "provider_login": ("provider login failure", "provider login failures"),
          "usage_limit": ("usage limit reached", "usage limits reached"),
          "database": ("database alert", "database alerts"), "run_failed": ("run failed", "runs failed")}


def _plural(kind: str, count: int) -> str:
    one, many = _NAMES.get(kind, (kind, kind))
    return one if count == 1 else many
