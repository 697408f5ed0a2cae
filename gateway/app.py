"""The composition root: opens the configured backend (gateway/composition.py), builds the queue, the
handler, the channel supervision and the backend's runtime (processing, delivery), runs them, stops them."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

from gateway.api import (
    BuiltinProvider,
    Channel,
    ChannelContext,
    FunctionSpec,
    Handler,
    HandlerContext,
    PermanentError,
)
from gateway.backends.runtime import Delivery, Runtime, RuntimeParts
from gateway.composition import open_backend
from gateway.home import Home, atomic_write, queue_depths
from gateway.models import IncomingPayload, OutgoingPayload
from gateway.plugin_manager import call_each
from gateway.runtime import orphans
from gateway.runtime.composed import ComposedRuntime
from gateway.runtime.containment import supervise_children
from gateway.runtime.intake import Intake
from gateway.runtime.receipts import takes_receipts
from gateway.runtime.reload import SettingsReload, run_checks
from gateway.runtime.sending import Sender
from gateway.runtime.supervision import RETRY_INITIAL_S, RETRY_MAX_S, ChannelSupervisor
from gateway.runtime.worker import Worker
from gateway.settings import ChannelProfile, Settings, secret_env_names
from gateway.spool.queue import FileQueue
from gateway.spool.watch import FolderWatch, OnName, OnRescan
from gateway.stores import AUDIT, AuditLog
from gateway.telemetry import tracing
from gateway.telemetry.alerts import Alerts
from gateway.telemetry.events import EventLog, utc_now_iso
from gateway.telemetry.logs import apply_log_settings, hide_in_logs
from gateway.telemetry.redaction import dsn_passwords

if TYPE_CHECKING:
    from gateway.dashboard.service import Dashboard

log = logging.getLogger("switchyard")

SHUTDOWN_GRACE_S = 10.0
STOP_TAIL_S = 5.0  # how long stop waits for a step past its own grace (a handler, channels, background tasks)
CHANNEL_RETRY_INITIAL_S = RETRY_INITIAL_S  # a failed channel's restarts (gateway/runtime/supervision.py)
CHANNEL_RETRY_MAX_S = RETRY_MAX_S
TYPING_REFRESH_S = 4.0
MAINTENANCE_INTERVAL_S = 60.0


def configured_secrets(settings: Settings) -> list[str]:
    """The values of every environment variable a `*_env` key names (channel tokens, the DSN, the dashboard
    token), and any password written inside one of them (a DSN's: libpq's errors may quote it alone)."""
    values = [os.environ[name] for name in sorted(secret_env_names(settings)) if os.environ.get(name)]
    stripped = [value.strip() for value in values if value.strip() != value]  # as a provider's key is passed on
    return [*values, *stripped, *(password for value in values for password in dsn_passwords(value))]


class Gateway:
    """One running Switchyard process on one home."""

    def __init__(self, home: Home, settings: Settings, pm: pluggy.PluginManager, *, role: str = "run",
                 settings_file: Path | None = None, request_stop: Callable[[], None] = lambda: None):
        """`settings_file`: where `settings` were read, watched for edits (None: never); `request_stop` ends the run."""
        self.home = home
        self.role = role  # "run"; "worker": processing only, no channels, no dispatcher (postgres backend)
        self.settings = settings
        self.pm = pm
        apply_log_settings(settings)
        home.create()
        listening = bool(pm.hook.switchyard_event.get_hookimpls())  # else no hook call for each event
        self.events = EventLog(home.events_file, secrets=configured_secrets(settings),
                               observers=[lambda event: pm.hook.switchyard_event(event=event)] if listening else [])
        self._owns_tracing = tracing.active() is None and settings.telemetry is not None  # else a test's, or off
        self.tracing = (tracing.install(settings.telemetry, role=role, redact=self.events.redact) if self._owns_tracing
                        else tracing.active())
        qs = settings.queue
        self.queue = FileQueue(home, fsync=qs.fsync, max_payload_bytes=qs.max_payload_bytes)  # incoming/ on both
        self.backend = open_backend(home, settings, pm)
        self.pairing = self.backend.pairing()  # every channel's `context.access` shares it
        self.supervisor = ChannelSupervisor(self._start_channel, self.events, on_change=self._write_status,
                                            spawn=self._spawn, retry_s=(CHANNEL_RETRY_INITIAL_S, CHANNEL_RETRY_MAX_S))
        self.channel_status: dict[str, dict[str, Any]] = self.supervisor.status
        self.channels: list[Channel] = self.supervisor.channels
        self.handler: Handler | None = None
        self.dispatcher: Delivery | None = None
        named = {t for types in call_each(pm, "switchyard_reply_named_by_message_id", events=self.events)
                 for t in types}
        parts = RuntimeParts(
            home=home, settings=settings, events=self.events, queue=self.queue, role=role,
            supervisor=self.supervisor, worker=functools.partial(
                Worker, events=self.events, settings=settings.queue, on_start=self._show_typing),
            wants_receipt=self._takes_receipts, receipt_profiles=self.receipt_profiles, named_by_message_id=named,
            on_written=self._on_written,
            send_loop=functools.partial(Sender, events=self.events, settings=settings.queue))
        self.runtime: Runtime = self.backend.runtime(parts, functools.partial(ComposedRuntime, parts))
        self.intake = Intake(home, self.queue, self.events, wake=self.runtime.wake)  # channels' sink, incoming/ notices
        self._close_event_sink: Callable[[], None] = self.runtime.close_events
        self.outbox = self.runtime.outbox
        self.alerts = Alerts.configured(settings, self.outbox, self.events)  # `alerts:`, else None
        self._watches: list[FolderWatch] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None  # while running: the outbox's replies reach the dispatcher
        self._stopping = self.supervisor.stopping  # set first thing in stop(); every retry loop checks it
        self.unfinished: list[str] = []  # what stop() gave up waiting for (the process must not wait on it)
        self.started_at = utc_now_iso()
        self.dashboard: Dashboard | None = None
        if settings.dashboard.port is not None:  # loads aiohttp and prometheus-client only when it is on
            from gateway.dashboard.service import Dashboard, Served
            self.dashboard = Dashboard(Served(  # raises SettingsError when its token is unset
                home=home, settings=settings, events=self.events, pm=pm, channel_status=self.channel_status,
                started_at=self.started_at, backend=self.backend, view=self.runtime.queue_view()))
        self._request_stop = request_stop
        self.contexts: dict[str, ChannelContext] = {}  # each started channel's, by profile id
        self.reload = None if settings_file is None else SettingsReload(
            settings_file, settings, run_checks(home, pm, settings_file), self.events, audit=self._audit_log())

    # --- start ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Recovers the queue, starts the handler, then the backend's channels, processing and delivery."""
        self._loop = asyncio.get_running_loop()
        self.events.write_per_turn(self._loop)
        await asyncio.to_thread(orphans.sweep, self.home.root, self.events)  # before any turn is retried
        for paths in call_each(self.pm, "switchyard_init", events=self.events, home=self.home, settings=self.settings):
            for path in paths:  # e.g. the default orchestrator.yaml of a workspace that had none: say so
                log.warning("wrote the default %s (there was none)", path)
        for action in self.queue.open():
            self.events.emit("queue.recovered", reason=action)
        self.runtime.open()
        self.handler = self._build_handler()
        await self.handler.start()
        self.dispatcher = await self.runtime.start(self.handler)
        self._watch(self.home.incoming, self.intake.notice, self.intake.rescan)
        if self.dispatcher is not None:
            self._watch(self.home.outgoing, self.dispatcher.notice, self.dispatcher.rescan)
        self.runtime.watch(self._watch)
        self.queue.rescan()
        if self.dispatcher is not None:
            self.dispatcher.rescan()
        self._tasks.extend(self.runtime.run())
        self._tasks.append(asyncio.create_task(self._maintenance(), name="maintenance"))
        if self.alerts is not None:
            self._tasks.append(asyncio.create_task(self.alerts.run(), name="alerts"))
        if self.reload is not None:
            self.reload.check(self._apply_settings, self._write_status)  # an edit made since `run` read it
            self._tasks.append(asyncio.create_task(self.reload.watch(self._apply_settings, self._write_status),
                                                   name="settings-watch"))
        self.events.emit("gateway.started", pid=os.getpid(), channels=[c.profile_id for c in self.channels],
                         watch=self._watches[0].mode, home=self.runtime.home_mode)
        if self.dashboard is not None and await self.dashboard.start():
            self._write_status()

    def _audit_log(self) -> AuditLog | None:
        """The backend's audit log (a settings reload records role changes in it); None where none is kept."""
        try:
            return self.backend.store(AUDIT)
        except KeyError:
            return None

    def _takes_receipts(self, message: IncomingPayload) -> bool:
        """Whether the channel a message came from is a chat that wants "queued" receipts."""
        channel = next((c for c in self.channels if c.profile_id == message.profile), None)
        return channel is not None and takes_receipts(channel)

    def receipt_profiles(self) -> list[str]:
        """The profile ids of the running channels that want "queued" receipts."""
        return [channel.profile_id for channel in list(self.channels) if takes_receipts(channel)]

    def _build_handler(self) -> Handler:
        functions: list[FunctionSpec] = []
        for declared in call_each(self.pm, "switchyard_functions", events=self.events):
            functions.extend(declared)
        providers: dict[str, BuiltinProvider] = {}
        for declared in call_each(self.pm, "switchyard_providers", events=self.events):
            providers.update(declared)
        context = HandlerContext(home=self.home, settings=self.settings, events=self.events,
                                 outbox=self.outbox, queue_stats=self.queue_stats, functions=functions,
                                 builtin_providers=providers, dead_letter=self._dead_letter, backend=self.backend,
                                 enqueue=self.intake.sink if self.role == "run" else None,
                                 file_limits=self._file_limits())
        handler = self.pm.hook.switchyard_handler(context=context)
        if handler is None:
            raise RuntimeError("no plugin provides a handler (is the orchestrator plugin installed?)")
        return handler  # type: ignore[no-any-return]

    def _file_limits(self) -> dict[str, int]:
        """Every plugin's `switchyard_file_limits`, joined: the largest file per channel type."""
        return {kind: size for limits in call_each(self.pm, "switchyard_file_limits", events=self.events)
                for kind, size in limits.items()}

    def _dead_letter(self, message: IncomingPayload, reason: str, errors: list[str]) -> str | None:
        """gateway.api.LateDeadLetter through the backend, with the `job.failed.final` a dead message has."""
        name = self.runtime.dead_letter(message, reason, errors)
        if name is not None:
            self.events.emit("job.failed.final", job_id=name, state="failed_final", kind="message",
                             channel=message.channel, profile=message.profile, conversation=message.conversation,
                             reason=reason, failure_reason=reason, attempts=1, file=name)
        return name

    async def _start_channel(self, profile: ChannelProfile) -> Channel:
        """Builds and starts one profile's channel (as the settings are now: a restart after a reload keeps
        its `allow_from`); raises why it cannot."""
        profile = self.settings.profile(profile.id) or profile
        context = ChannelContext(home=self.home, settings=self.settings, profile=profile, events=self.events,
                                 outbox=self.outbox, on_state=functools.partial(self._channel_reported, profile),
                                 pairing=self.pairing)
        self.contexts[profile.id] = context  # reconfigured on a reload; its supervised tasks stopped after the channel
        channel = self.pm.hook.switchyard_channels(profile=profile, context=context)
        if channel is None:
            known = sorted({t for types in call_each(self.pm, "switchyard_channel_types") for t in types})
            raise PermanentError(f"no installed plugin provides channel type {profile.type!r} "
                                 f"(available: {', '.join(known)})")
        if getattr(channel, "reply_named_by_message_id", False):  # before its first message is sent
            self.outbox.named_by_message_id.add(profile.type)
        await channel.start(self.intake.sink)
        return channel  # type: ignore[no-any-return]

    def _channel_reported(self, profile: ChannelProfile, state: str, note: str | None) -> None:
        """A channel's own report: a note beside its state, or that it ended by itself (then, with no
        channel left running, the gateway stops)."""
        self.channel_status[profile.id] = {"type": profile.type, "state": state, **({"reason": note} if note else {})}
        self._write_status()
        if state != "stopped":
            return
        log.info("channel %s (%s) stopped: %s", profile.id, profile.type, note)
        self.events.emit("channel.stopped", channel=profile.type, profile=profile.id, reason=note)
        if not any(entry["state"] in ("running", "retrying") for entry in self.channel_status.values()):
            log.info("no channel is left running: stopping")
            self._request_stop()

    def _spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        """Runs `work` in the background until it ends or the gateway stops."""
        self._tasks.append(asyncio.create_task(work, name=name))

    def _watch(self, folder: Path, on_name: OnName, on_rescan: OnRescan) -> None:
        watch = FolderWatch(folder, on_name, on_rescan, poll_ms=self.settings.queue.poll_ms)
        watch.start(force_polling=os.environ.get("SWITCHYARD_FORCE_POLLING") == "1")
        self._watches.append(watch)

    # --- wiring -----------------------------------------------------------------------------

    def _on_written(self, name: str, payload: OutgoingPayload) -> None:
        """Hands a reply the outbox just wrote to the dispatcher, on the loop's thread (a plugin may
        write from another thread), so the dispatcher need not read and parse it again."""
        if self.dispatcher is None or self._loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self.dispatcher.schedule(name, payload)
        elif not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.dispatcher.schedule, name, payload)

    def _show_typing(self, message: IncomingPayload) -> Callable[[], None] | None:
        """Shows the channel's typing indicator until the message is answered; returns the stopper."""
        channel = self.dispatcher.channel_for_incoming(message) if self.dispatcher is not None else None
        typing = getattr(channel, "typing", None)
        if typing is None:
            return None
        task = asyncio.create_task(_keep_typing(typing, message.conversation),
                                   name=f"typing:{message.conversation}")

        def stop() -> None:
            task.cancel()

        return stop

    def queue_stats(self) -> dict[str, Any]:
        """Queue depths and worker figures (for diagnostics, `queue_stats` and `status`)."""
        return {**queue_depths(self.home), **self.runtime.stats()}

    async def _maintenance(self) -> None:
        while True:
            self._write_status()
            await self.runtime.prune()
            await asyncio.sleep(MAINTENANCE_INTERVAL_S)
            await asyncio.to_thread(orphans.sweep, self.home.root, self.events)  # a sibling process died since

    def _apply_settings(self, settings: Settings) -> None:
        """Hands settings reloaded while running to the handler and to each running channel's context."""
        for secret in configured_secrets(settings):
            self.events.add_secret(secret)
        hide_in_logs(configured_secrets(settings))
        self.settings = settings
        reload_settings = getattr(self.handler, "reload_settings", None)
        if reload_settings is not None:
            reload_settings(settings)
        for profile in settings.channels:
            if (context := self.contexts.get(profile.id)) is not None:
                context.reconfigure(profile, settings)

    def _write_status(self) -> None:
        status = {"pid": os.getpid(), "started_at": self.started_at, "updated_at": utc_now_iso(),
                  "watch": self._watches[0].mode if self._watches else "stopped",
                  "channels": self.channel_status}
        if self.reload is not None:
            status["settings"] = self.reload.status()
        if self.dashboard is not None and self.dashboard.url:
            status["dashboard"] = self.dashboard.url
        with suppress(OSError):
            atomic_write(self.home.state / "gateway.json", json.dumps(status, indent=2).encode(), fsync=False)

    # --- stop -------------------------------------------------------------------------------

    async def stop(self) -> None:
        """Stops intake, finishes or requeues in-flight work, delivers what it can, closes everything.

        Every step is bounded: what does not finish in time is named in the log and in a
        `gateway.stop_incomplete` event, left in `unfinished`, and not waited for again; messages it
        held stay claimed and are recovered by the next start, as after a kill.
        """
        self._stopping.set()
        started = time.monotonic()
        incoming_watch, other_watches = self._watches[:1], self._watches[1:]
        for watch in incoming_watch:
            watch.stop()
        await self._bounded({"worker": self.runtime.stop(SHUTDOWN_GRACE_S)}, SHUTDOWN_GRACE_S + STOP_TAIL_S)
        if self.handler is not None:
            await self._bounded({"handler": self.handler.stop()}, STOP_TAIL_S)
        if self.dispatcher is not None:
            grace = max(1.0, SHUTDOWN_GRACE_S - (time.monotonic() - started))
            await self._bounded({"dispatcher": self.dispatcher.stop(grace)}, grace + STOP_TAIL_S)
        for watch in other_watches:
            watch.stop()
        await self._bounded({f"channel:{c.profile_id}": c.stop() for c in self.channels}, STOP_TAIL_S)
        await self._bounded({f"tasks:{p}": c.stop_tasks() for p, c in self.contexts.items() if c.tasks}, STOP_TAIL_S)
        await self._bounded({"leases": self.runtime.release()}, STOP_TAIL_S)
        if self.dashboard is not None:
            await self._bounded({"dashboard": self.dashboard.stop()}, STOP_TAIL_S)
        self._loop = None  # no reply handed to the stopped dispatcher
        for task in self._tasks:
            task.cancel()
        await self._bounded({task.get_name(): task for task in self._tasks}, STOP_TAIL_S)
        if self.unfinished:
            log.warning("stop: gave up waiting for %s; what they held is recovered at the next start",
                        ", ".join(self.unfinished))
            self.events.emit("gateway.stop_incomplete", pid=os.getpid(), unfinished=self.unfinished)
        self.events.emit("gateway.stopped", pid=os.getpid())
        self.queue.close()
        self.outbox.close()
        await self.runtime.close()
        await asyncio.to_thread(self.backend.close)  # the stores' pool: after the handler, which may still push
        await asyncio.to_thread(self._close_event_sink)  # stores the events still buffered
        if self.tracing is not None:  # the spans still buffered, sent before the process ends
            await asyncio.to_thread(tracing.uninstall if self._owns_tracing else self.tracing.provider.force_flush)
        self.events.close()
        (self.home.state / "gateway.json").unlink(missing_ok=True)

    async def _bounded(self, steps: dict[str, Awaitable[Any]], within: float) -> None:
        """Runs stop steps side by side for at most `within` seconds; cancels and records the late ones."""
        if not steps:
            return
        tasks = {asyncio.ensure_future(step): name for name, step in steps.items()}
        _, late = await asyncio.wait(tasks, timeout=within)
        for task, name in tasks.items():
            if task in late:
                task.cancel()
                self.unfinished.append(name)
            elif not task.cancelled() and task.exception() is not None:
                log.warning("%s did not stop cleanly: %s", name, task.exception())

async def _keep_typing(typing: Callable[[str], Awaitable[None]], conversation: str) -> None:
    """Calls a channel's `typing` now and every few seconds (platforms drop the indicator after ~5 s)."""
    while True:
        try:
            await typing(conversation)
        except Exception as exc:  # an indicator is cosmetic: never let it fail a message
            log.debug("typing indicator failed for %s: %s", conversation, exc)
            return
        await asyncio.sleep(TYPING_REFRESH_S)


async def run_gateway(gateway: Gateway, stop: asyncio.Event) -> None:
    """Runs a gateway until `stop` is set (a signal in the CLI, or its `request_stop`); it supervises its children."""
    supervise_children()
    orphans.claim(gateway.home.root)  # the runs' tokens name this process, for the sweep of a next one
    await gateway.start()
    try:
        await stop.wait()
    finally:
        await gateway.stop()
